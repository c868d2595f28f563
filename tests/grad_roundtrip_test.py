#!/usr/bin/env python3
"""`flashbench grad` against a float64 NumPy reference, on random odd shapes, every variant.

usage: grad_roundtrip_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def reference(q, k, v, do, causal):
    """O and the gradients of sum(O * dO), float64, straight from the formulas.

    The formulas are seed 003's (docs/articles.md).
    """
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d)
    s = scale * q @ np.swapaxes(k, -1, -2)
    if causal:
        n = q.shape[-2]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ v
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    big_d = (p * dp).sum(axis=-1, keepdims=True)
    ds = p * (dp - big_d)
    dq = scale * ds @ k
    dk = scale * np.swapaxes(ds, -1, -2) @ q
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
    shapes = [(1, 1, 1, 64), (2, 3, 37, 40), (1, 2, 131, 72), (3, 1, 19, 8)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for shape in shapes:
            arrays = {name: rng.standard_normal(shape) for name in ("q", "k", "v", "do")}
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
                        assert got.dtype == np.float32 and got.shape == shape, (name, got.dtype, got.shape)
                        error = normwise(got.astype(np.float64), ref)
                        status = "ok" if error <= 1e-5 else "FAIL"
                        if status == "FAIL":
                            failures += 1
                        print(f"{status} {variant:10s} causal={int(causal)} shape={shape} {name}: {error:.2e}")
    print(f"{4 * 2 * len(shapes) * 4 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
