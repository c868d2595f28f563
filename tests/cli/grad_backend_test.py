#!/usr/bin/env python3
"""`flashbench grad`, one path for every backend: its refusals are one line and exit 2 with nothing
written (an implementation the backend lacks, an unknown dtype, an implementation of another variant
than --variant asked, K and V of different shapes, G not dividing H); every variant's O, dQ, dK and
dV on independent Q, K, V (GQA, N_k ≠ N, causal bottom-right) match a float64 NumPy layer written
here from the formulas — on the CPU always, on the GPU where there is one (cudnn in bf16 too), and
where there is none, asking for it is exit 2 with nothing written.

usage: tests/cli/grad_backend_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def layer(q, k, v, do, causal):
    """O, dQ, dK, dV of O = softmax(Q Kᵀ/sqrt(d)) V in float64; q, do [B,H,N,d], k, v [B,G,N_k,d].

    Query head h reads K/V head h // (H/G); dK and dV of a K/V head are summed over the query heads
    that read it. The causal mask is bottom-right aligned: row i sees keys j <= i + N_k - N.
    """
    r = q.shape[1] // k.shape[1]
    kx, vx = np.repeat(k, r, axis=1), np.repeat(v, r, axis=1)
    n, nk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / np.sqrt(d)
    s = scale * q @ np.swapaxes(kx, -1, -2)
    if causal:
        sees = np.arange(nk)[None, :] <= np.arange(n)[:, None] + nk - n
        s = np.where(sees, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ vx
    dvx = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(vx, -1, -2)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))
    dq = scale * ds @ kx
    dkx = scale * np.swapaxes(ds, -1, -2) @ q
    b, g = k.shape[0], k.shape[1]
    group_sum = lambda x: x.reshape(b, g, r, nk, d).sum(axis=2)  # noqa: E731
    return o, dq, group_sum(dkx), group_sum(dvx)


def round_to_bf16(a):
    """float64 -> the nearest bf16 (ties to even), as float64: the upper 16 bits of the float32."""
    bits = a.astype(np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


def round_to_fp32(a):
    return a.astype(np.float32).astype(np.float64)


def relative(got, ref):
    return np.abs(got - ref).max() / np.abs(ref).max()


def main():
    binary = sys.argv[1]
    failures = 0
    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # H = 4 query heads on G = 2 K/V heads, N = 128 queries, N_k = 256 keys (multiples of 128:
        # every cuDNN 9 flashbench takes runs them), d = 64.
        tensors = {
            "q": rng.standard_normal((1, 4, 128, 64)),
            "k": rng.standard_normal((1, 2, 256, 64)),
            "v": rng.standard_normal((1, 2, 256, 64)),
            "do": rng.standard_normal((1, 4, 128, 64)),
        }
        for name, a in tensors.items():
            np.save(tmp / f"{name}.npy", a)
        np.save(tmp / "v_short.npy", tensors["v"][:, :, :200])
        np.save(tmp / "k_three.npy", rng.standard_normal((1, 3, 256, 64)))
        np.save(tmp / "v_three.npy", rng.standard_normal((1, 3, 256, 64)))

        def grad(*flags, k="k.npy", v="v.npy", out="out"):
            command = [binary, "grad", *flags, "--q", str(tmp / "q.npy"), "--k", str(tmp / k), "--v", str(tmp / v),
                       "--do", str(tmp / "do.npy"), "--out", str(tmp / out)]
            return subprocess.run(command, capture_output=True, text=True, timeout=300)

        refusals = [
            (("--impl", "cudnn"), {}, "no implementation 'cudnn' on cpu"),
            (("--backend", "cuda", "--impl", "nosuch"), {}, "nosuch"),
            (("--dtype", "fp8"), {}, "fp8"),
            (("--backend", "cuda", "--impl", "cudnn", "--variant", "standard"), {}, "variant"),
            ((), {"v": "v_short.npy"}, "--v"),
            ((), {"k": "k_three.npy", "v": "v_three.npy"}, "divide"),
        ]
        for i, (flags, files, needle) in enumerate(refusals):
            done = grad(*flags, **files, out=f"refused{i}")
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            written = list((tmp / f"refused{i}").glob("*")) if (tmp / f"refused{i}").exists() else []
            ok = done.returncode == 2 and len(lines) == 1 and needle in done.stderr and not written
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'} grad {' '.join(flags)} {files}: exit {done.returncode}, "
                  f"{done.stderr.strip()!r}")

        # (backend, implementation, dtype, tolerance): fp32 arithmetic on fp32 inputs is within 1e-4 of
        # float64; bf16 storage (on the GPU: the CPU's runs G = H, N_k = N only) rounds the inputs, O
        # and the gradients, ~4e-3 each.
        runs = [("cpu", variant, "fp32", 1e-4) for variant in ("standard", "v1", "v2", "checkpoint")]
        probe = grad("--backend", "cuda", "--variant", "standard", out="probe")
        if probe.returncode != 0:
            written = list((tmp / "probe").glob("*")) if (tmp / "probe").exists() else []
            ok = probe.returncode == 2 and not written
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'} no GPU here: exit {probe.returncode}, {probe.stderr.strip()!r}")
        else:
            runs += [("cuda", variant, "fp32", 1e-4) for variant in ("standard", "v1", "v2", "checkpoint")]
            runs += [("cuda", impl, "bf16", 5e-2) for impl in ("v2", "cudnn")]
        for backend, impl, dtype, tolerance in runs:
            for causal in (False, True):
                # The device rounds the inputs to the dtype; so does the reference.
                rounding = round_to_bf16 if dtype == "bf16" else round_to_fp32
                want = layer(*(rounding(tensors[n]) for n in ("q", "k", "v", "do")), causal)
                flags = ["--backend", backend, "--impl", impl, "--dtype", dtype] + (["--causal"] if causal else [])
                out = f"{backend}-{impl}-{dtype}-{causal}"
                done = grad(*flags, out=out)
                if done.returncode == 2 and "cuDNN" in done.stderr and impl == "cudnn":
                    print(f"skip cudnn: {done.stderr.strip()}")
                    continue
                if done.returncode != 0:
                    failures += 1
                    print(f"FAIL grad {' '.join(flags)}: exit {done.returncode}, {done.stderr.strip()!r}")
                    continue
                got = [np.load(tmp / out / f"{name}.npy") for name in ("o", "dq", "dk", "dv")]
                shapes_ok = all(g.dtype == np.float32 and g.shape == w.shape for g, w in zip(got, want))
                errors = [relative(g, w) for g, w in zip(got, want)] if shapes_ok else [np.inf] * 4
                ok = shapes_ok and max(errors) <= tolerance
                failures += not ok
                print(f"{'ok' if ok else 'FAIL'} {backend} {impl} {dtype} causal={int(causal)}: "
                      + ", ".join(f"{n} {e:.2e}" for n, e in zip(("O", "dQ", "dK", "dV"), errors))
                      + f" (tolerance {tolerance})")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
