#!/usr/bin/env python3
"""`flashbench grad --backend cuda`: its refusals are one line and exit 2 with nothing written (K or V
not the array Q is, --dtype or --impl without a device backend, an unknown implementation or
dtype, an implementation of another variant than --variant asked); where a GPU is present, fp32
runs of every variant and of cudnn in bf16 match a float64 NumPy self-attention layer (O and
dX = dQ + dK + dV), and where there is none, asking for it is exit 2 with nothing written.

usage: grad_backend_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def layer(x, do, causal):
    """O and dX of O = softmax(X Xᵀ/sqrt(d)) X in float64, dX = dQ + dK + dV (seed 003's formulas)."""
    d = x.shape[-1]
    scale = 1.0 / np.sqrt(d)
    s = scale * x @ np.swapaxes(x, -1, -2)
    if causal:
        n = x.shape[-2]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ x
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(x, -1, -2)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))
    return o, scale * ds @ x + scale * np.swapaxes(ds, -1, -2) @ x + dv


def round_to_bf16(a):
    """float64 -> the nearest bf16 (ties to even), as float64: the upper 16 bits of the float32."""
    bits = a.astype(np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


def relative(got, ref):
    return np.abs(got - ref).max() / np.abs(ref).max()


def main():
    binary = sys.argv[1]
    failures = 0
    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        x = rng.standard_normal((1, 2, 128, 64))  # N a multiple of 128: every cuDNN 9 flashbench takes runs it
        do = rng.standard_normal(x.shape)
        np.save(tmp / "x.npy", x)
        np.save(tmp / "other.npy", x + 1.0)
        np.save(tmp / "do.npy", do)

        def grad(*flags, q="x.npy", k="x.npy", out="out"):
            command = [binary, "grad", *flags, "--q", str(tmp / q), "--k", str(tmp / k), "--v", str(tmp / "x.npy"),
                       "--do", str(tmp / "do.npy"), "--out", str(tmp / out)]
            return subprocess.run(command, capture_output=True, text=True, timeout=300)

        refusals = [
            (("--backend", "cuda"), "other.npy", "--k must hold the same array as --q"),
            (("--dtype", "bf16"), "x.npy", "--backend cuda"),
            (("--impl", "cudnn"), "x.npy", "--backend cuda"),
            (("--backend", "cuda", "--impl", "nosuch"), "x.npy", "nosuch"),
            (("--backend", "cuda", "--dtype", "fp8"), "x.npy", "fp8"),
            (("--backend", "cuda", "--impl", "cudnn", "--variant", "standard"), "x.npy", "variant"),
        ]
        for i, (flags, k, needle) in enumerate(refusals):
            done = grad(*flags, k=k, out=f"refused{i}")
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            written = list((tmp / f"refused{i}").glob("*")) if (tmp / f"refused{i}").exists() else []
            ok = done.returncode == 2 and len(lines) == 1 and needle in done.stderr and not written
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'} grad {' '.join(flags)}: exit {done.returncode}, {done.stderr.strip()!r}")

        probe = grad("--backend", "cuda", "--variant", "standard", "--dtype", "fp32", out="probe")
        if probe.returncode != 0:
            written = list((tmp / "probe").glob("*")) if (tmp / "probe").exists() else []
            ok = probe.returncode == 2 and not written
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'} no GPU here: exit {probe.returncode}, {probe.stderr.strip()!r}")
        else:
            runs = [(variant, "fp32", 1e-4) for variant in ("standard", "v1", "v2", "checkpoint")]
            runs.append(("cudnn", "bf16", 5e-2))  # bf16 storage: rounding of X, O and dX alone is ~4e-3
            for impl, dtype, tolerance in runs:
                for causal in (False, True):
                    # The device rounds the inputs to the dtype; so does the reference.
                    rounding = round_to_bf16 if dtype == "bf16" else (lambda a: a.astype(np.float32).astype(np.float64))
                    want_o, want_dx = layer(rounding(x), rounding(do), causal)
                    flags = ["--backend", "cuda", "--impl", impl, "--dtype", dtype] + (["--causal"] if causal else [])
                    done = grad(*flags, out=f"{impl}-{causal}")
                    if done.returncode == 2 and "cuDNN" in done.stderr and impl == "cudnn":
                        print(f"skip cudnn: {done.stderr.strip()}")
                        continue
                    if done.returncode != 0:
                        failures += 1
                        print(f"FAIL grad {' '.join(flags)}: exit {done.returncode}, {done.stderr.strip()!r}")
                        continue
                    o = np.load(tmp / f"{impl}-{causal}" / "o.npy")
                    dx = np.load(tmp / f"{impl}-{causal}" / "dx.npy")
                    errors = (relative(o, want_o), relative(dx, want_dx))
                    ok = o.dtype == np.float32 and dx.shape == x.shape and max(errors) <= tolerance
                    failures += not ok
                    print(f"{'ok' if ok else 'FAIL'} {impl} {dtype} causal={int(causal)}: O {errors[0]:.2e}, "
                          f"dX {errors[1]:.2e} (tolerance {tolerance})")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
