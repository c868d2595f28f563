"""Peer rows: PyTorch standard attention with autograd on the CPU, on the same shapes as a flashbench run.

For each N in --seq (and causal and/or not), times S = scale * Q K^T (masked), P = softmax(S),
O = P V forward, and its autograd backward from a random dO, in fp32 with --threads threads, and
writes rows in flashbench's JSON contract (schema_version 1) with backend "torch-cpu-standard" and
variant "standard" (it keeps P, and S besides), so flashbench's `compare` and the CPU benchmark script
put them beside flashbench's rows.

PyTorch's CPU matrix products go to the BLAS it was built against; Debian's python3-torch uses the
system BLAS alternative. This script sets OPENBLAS_CORETYPE=SkylakeX (unless the caller set it) and
OPENBLAS_NUM_THREADS = --threads before torch loads, because OpenBLAS 0.3.21 may not recognise
newer Xeons and fall back to SSE kernels, and records the BLAS torch reports in meta.

Timing: time.perf_counter around each forward and each backward (retain_graph; gradients reset
outside the timed region), warm-up first, then samples until the median's ~95% confidence half-width
is under --max-noise or --max-time seconds went by (at least --min-samples). Throughput: the
FlashAttention convention, forward 4*B*H*N^2*d FLOP, backward 2.5x, halved when causal.

Usage: python3 scripts/peers/torch_cpu.py OUT.json [--seq 1024,2048] [--batch 1] [--heads 8]
       [--head-dim 64] [--mask false|true|both] [--threads 2]
"""
import argparse
import datetime
import json
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402


def sample(fn, args, before=None):
    """Times fn() on the wall clock until the stopping rule holds; `before` runs untimed each time."""
    def time_once():
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    return timing.sample(time_once, args, before)


def bench(torch, B, H, N, d, causal, args):
    row = {"backend": "torch-cpu-standard", "variant": "standard",
           "problem": {"batch": B, "heads": H, "seq": N, "head_dim": d, "layers": 1, "causal": causal,
                       "dtype": "fp32"},
           "status": "ok", "reason": "", "threads": args.threads, "device": platform.processor() or "cpu"}
    try:
        gen = torch.Generator().manual_seed(args.seed)
        q = torch.randn(B, H, N, d, generator=gen, requires_grad=True)
        k = torch.randn(B, H, N, d, generator=gen, requires_grad=True)
        v = torch.randn(B, H, N, d, generator=gen, requires_grad=True)
        dO = torch.randn(B, H, N, d, generator=gen)
        scale = 1.0 / math.sqrt(d)
        mask = torch.ones(N, N, dtype=torch.bool).triu(1) if causal else None

        def forward():
            s = torch.matmul(q, k.transpose(-1, -2)) * scale
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            return torch.matmul(torch.softmax(s, dim=-1), v)

        def reset_grads():
            q.grad = k.grad = v.grad = None

        with torch.no_grad():
            fwd = sample(forward, args)
        o = forward()
        bwd = sample(lambda: o.backward(dO, retain_graph=True), args, before=reset_grads)
        del o
        flop = 4 * B * H * N * N * d * (0.5 if causal else 1.0)
        row["timing"] = {"fwd": fwd, "bwd": bwd}
        row["throughput"] = {"fwd_tflops": flop / fwd["median_ms"] / 1e9,
                             "bwd_tflops": 2.5 * flop / bwd["median_ms"] / 1e9}
        row["flop"] = {"fwd": flop, "bwd": 2.5 * flop}
        row["bwd_over_fwd"] = bwd["median_ms"] / fwd["median_ms"]
        # What autograd keeps for backward: S (the product's output, for the mask/scale nodes) and P
        # (softmax's output, for its own backward and for P V's), each [B, H, N, N] fp32.
        row["memory"] = {"measured": None,
                         "model": {"kept_bytes": 2 * B * H * N * N * 4 + (B * H * N * N if causal else 0)}}
    except (RuntimeError, MemoryError) as e:
        row["status"], row["reason"] = "failed", str(e).splitlines()[0][:200]
    return row


def loaded_blas_libraries():
    """The BLAS shared objects this process actually mapped (the Debian alternative decides which)."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "blas" in line.lower() and "/" in line}
        return sorted(paths)
    except OSError:
        return []


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="JSON file to write")
    p.add_argument("--seq", type=int_list, default=[1024, 2048], help="comma list of N")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int_list, default=[64], help="comma list of d")
    p.add_argument("--mask", choices=["false", "true", "both"], default="false")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    timing.add_arguments(p, warmup=1, max_samples=50, max_time=10.0)
    p.add_argument("--seed", type=int, default=20261129)
    args = p.parse_args()

    # Before torch loads its BLAS: see the module docstring.
    os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)

    masks = {"false": [False], "true": [True], "both": [False, True]}[args.mask]
    rows = []
    for d in args.head_dim:
        for causal in masks:
            for n in args.seq:
                row = bench(torch, args.batch, args.heads, n, d, causal, args)
                rows.append(row)
                t = row.get("timing", {})
                print(f"torch-cpu-standard N={n} d={d} causal={causal}: "
                      + (f"fwd {t['fwd']['median_ms']:.1f} ms, bwd {t['bwd']['median_ms']:.1f} ms"
                         if row["status"] == "ok" else f"{row['status']}: {row['reason']}"),
                      file=sys.stderr)
    blas = {"blas_info": next((item.split("=", 1)[1] for item in torch.__config__.show().replace(",", " ").split()
                               if item.startswith("BLAS_INFO=")), "unknown"),
            "loaded": loaded_blas_libraries()}
    document = {"schema_version": 1,
                "meta": {"tool": "torch_cpu.py", "version": torch.__version__, "argv": sys.argv,
                         "host": {"cpu": platform.processor(), "threads": args.threads,
                                  "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")},
                         "build": {"blas": blas},
                         "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")},
                "rows": rows}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(document, fh, indent=1)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
