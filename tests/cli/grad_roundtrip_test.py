#!/usr/bin/env python3
"""`flashbench grad` against a float64 NumPy reference, on random odd shapes, every variant.

usage: tests/cli/grad_roundtrip_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def reference(q, k, v, do, causal):
    """O and the gradients of sum(O * dO), float64, straight from the formulas.

    The formulas are seed 003's (docs/articles.md). q, do [B,H,N,d]; k, v [B,G,Nk,d]: each K/V head
    serves H/G query heads, and its gradients sum over them. The causal mask is bottom-right aligned:
    row i sees keys j <= i + Nk - N; a row that sees none gives 0.
    """
    d = q.shape[-1]
    group = q.shape[1] // k.shape[1]
    k_heads = np.repeat(k, group, axis=1)
    v_heads = np.repeat(v, group, axis=1)
    scale = 1.0 / np.sqrt(d)
    s = scale * q @ np.swapaxes(k_heads, -1, -2)
    n, n_k = q.shape[-2], k.shape[-2]
    visible = np.tril(np.ones((n, n_k), dtype=bool), k=n_k - n) if causal else np.ones((n, n_k), dtype=bool)
    s = np.where(visible, s, -np.inf)
    row_max = s.max(axis=-1, keepdims=True)
    p = np.where(visible, np.exp(s - np.where(np.isfinite(row_max), row_max, 0.0)), 0.0)
    total = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    o = p @ v_heads
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v_heads, -1, -2)
    big_d = (p * dp).sum(axis=-1, keepdims=True)
    ds = p * (dp - big_d)
    dq = scale * ds @ k_heads
    dk = scale * np.swapaxes(ds, -1, -2) @ q
    b, g = k.shape[0], k.shape[1]
    dk = dk.reshape(b, g, group, n_k, d).sum(axis=2)
    dv = dv.reshape(b, g, group, n_k, d).sum(axis=2)
    return o, dq, dk, dv


def normwise(x, ref):
    """||x - ref|| / ||ref||; plain ||x - ref|| where the reference is exactly zero (N = 1 makes dQ
    and dK vanish: a softmax over one column does not depend on the scores)."""
    norm = np.linalg.norm(ref)
    return np.linalg.norm(x - ref) / norm if norm > 0 else np.linalg.norm(x - ref)


def main():
    binary = sys.argv[1]
    rng = np.random.default_rng(7)
    failures = 0
    # (Q's shape, K's heads and rows): square multi-head, then GQA, MQA and N_k != N both ways.
    shapes = [((1, 1, 1, 64), 1, 1), ((2, 3, 37, 40), 3, 37), ((1, 2, 131, 72), 2, 131), ((3, 1, 19, 8), 1, 19),
              ((1, 4, 29, 16), 2, 45), ((2, 4, 45, 16), 1, 29), ((1, 3, 12, 8), 3, 5)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for shape, kv_heads, kv_rows in shapes:
            kv_shape = (shape[0], kv_heads, kv_rows, shape[3])
            arrays = {name: rng.standard_normal(shape if name in ("q", "do") else kv_shape)
                      for name in ("q", "k", "v", "do")}
            for name, array in arrays.items():
                # float64 for some, float32 for others: both are accepted.
                np.save(tmp / f"{name}.npy", array if name in ("q", "do") else array.astype(np.float32))
            for causal in (False, True):
                want = reference(arrays["q"], arrays["k"].astype(np.float32).astype(np.float64),
                                 arrays["v"].astype(np.float32).astype(np.float64), arrays["do"], causal)
                for variant in ("standard", "v1", "v2", "checkpoint"):
                    out = tmp / f"out-{variant}-{causal}"
                    command = [binary, "grad", "--variant", variant, "--q", str(tmp / "q.npy"),
                               "--k", str(tmp / "k.npy"), "--v", str(tmp / "v.npy"),
                               "--do", str(tmp / "do.npy"), "--out", str(out)]
                    if causal:
                        command.append("--causal")
                    subprocess.run(command, check=True)
                    for name, ref in zip(("o", "dq", "dk", "dv"), want):
                        got = np.load(out / f"{name}.npy")
                        assert got.dtype == np.float32 and got.shape == ref.shape, (name, got.dtype, got.shape)
                        error = normwise(got.astype(np.float64), ref)
                        status = "ok" if error <= 1e-5 else "FAIL"
                        if status == "FAIL":
                            failures += 1
                        print(f"{status} {variant:10s} causal={int(causal)} q={shape} k={kv_shape} {name}: {error:.2e}")
        failures += dropout_agrees(binary, tmp, rng)
    print(f"{failures} failed")
    return 1 if failures else 0


def dropout_agrees(binary, tmp, rng):
    """With --dropout every variant draws the same mask from --seed: v2 regenerates it in backward,
    standard keeps it; their outputs agree to fp32 rounding, and differ from the run without dropout."""
    q, do = rng.standard_normal((1, 4, 23, 16)), rng.standard_normal((1, 4, 23, 16))
    k, v = rng.standard_normal((1, 2, 31, 16)), rng.standard_normal((1, 2, 31, 16))
    for name, array in (("q", q), ("k", k), ("v", v), ("do", do)):
        np.save(tmp / f"drop-{name}.npy", array)
    results = {}
    for variant, dropout in (("standard", "0.3"), ("v1", "0.3"), ("v2", "0.3"), ("checkpoint", "0.3"), ("v2", "0")):
        out = tmp / f"drop-{variant}-{dropout}"
        subprocess.run([binary, "grad", "--variant", variant, "--causal", "--dropout", dropout, "--seed", "11",
                        "--q", str(tmp / "drop-q.npy"), "--k", str(tmp / "drop-k.npy"), "--v", str(tmp / "drop-v.npy"),
                        "--do", str(tmp / "drop-do.npy"), "--out", str(out)], check=True)
        results[(variant, dropout)] = [np.load(out / f"{name}.npy").astype(np.float64) for name in ("o", "dq", "dk", "dv")]
    failures = 0
    for variant in ("v1", "v2", "checkpoint"):
        for name, got, want in zip(("o", "dq", "dk", "dv"), results[(variant, "0.3")], results[("standard", "0.3")]):
            error = normwise(got, want)
            ok = error <= 1e-5
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'} dropout 0.3 {variant} against standard {name}: {error:.2e}")
    change = normwise(results[("v2", "0.3")][0], results[("v2", "0")][0])
    ok = change > 1e-2
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} dropout changes O by {change:.2e}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
