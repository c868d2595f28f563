"""Peer rows: PyTorch standard attention with autograd on the CPU, on the same shapes as a flashbench run.

For each N in --seq (and causal and/or not), times S = scale * Q K^T (masked), P = softmax(S),
O = P V forward, and its autograd backward from dO (dQ, dK, dV), in fp32 with --threads threads, and
writes rows in flashbench's JSON contract (schema_version 1) with backend "torch-cpu-standard" and
variant "standard" (it keeps P, and S besides), so flashbench's `compare` and the CPU benchmark script
put them beside flashbench's rows.

The operator is flashbench's: independent Q [B,H,N,d], K and V [B,G,N_k,d] and dO [B,H,N,d], i.i.d.
standard normal (Q, K, V times --input-scale) from --seed; G < H repeats K and V to H heads in the
forward (autograd sums their gradients back), as framework code without GQA does. The causal mask is
bottom-right aligned as flashbench's (row i sees keys j <= i + N_k - N); a row that sees no key
(N > N_k) gets uniform weights here instead of flashbench's zeros, which costs the same.

PyTorch's CPU matrix products go to the BLAS it was built against; Debian's python3-torch uses the
system BLAS alternative. This script sets OPENBLAS_CORETYPE (unless the caller set it) to the kernel
family this CPU can run (SkylakeX with AVX-512, Zen or Haswell with AVX2: SkylakeX's kernels die with
SIGILL on an AVX2-only EPYC) and OPENBLAS_NUM_THREADS = --threads before torch loads, because
OpenBLAS 0.3.21 may not recognise newer CPUs and fall back to older kernels, and records the BLAS
torch reports in meta.

Timing, the peers' protocol (timing.py) without its GPU parts: time.perf_counter around each forward
and each backward (one sample = a forward recording the graph, then the backward of its output;
gradients reset outside the timed regions), warm-up first, then samples until flashbench's rule
holds (at least --min-samples, then --max-samples, --max-time seconds of samples, or the median's
~95% confidence half-width under --max-noise). There are no GPU clocks: each phase's
throttled_samples, sm_clock_mhz, clock_event_reason_bits and median_unthrottled_ms are null,
excluded_samples is 0, and meta.timing.clocks says why. Rows and meta carry `provenance` (torch;
its GPU keys null).
Throughput: the FlashAttention convention, forward 4*B*H*N*N_k*d FLOP times the visible fraction of
the mask, backward 2.5x.

Usage: python3 scripts/peers/torch_cpu.py OUT.json [--seq 1024,2048] [--batch 1] [--heads 8]
       [--kv-heads 8] [--seq-k N_k] [--head-dim 64] [--mask false|true|both] [--threads 2]
       [--input-scale 1]
"""
import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402

NO_CLOCKS = "a CPU peer: no GPU clocks"


def visible_pairs(seq, seq_k, causal):
    """Query-key pairs the rows see (bottom-right causal: row i sees j <= i + N_k - N)."""
    if not causal:
        return seq * seq_k
    return sum(min(seq_k, max(0, i + seq_k - seq + 1)) for i in range(seq))


def wall_ms(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def bench(torch, B, H, G, N, Nk, d, causal, args):
    row = {"backend": "torch-cpu-standard", "variant": "standard",
           "problem": {"batch": B, "heads": H, "kv_heads": G, "seq": N, "seq_q": N, "seq_k": Nk, "head_dim": d,
                       "layers": 1, "causal": causal, "dropout": 0.0, "expand_kv": G < H, "dtype": "fp32"},
           "status": "ok", "reason": "", "threads": args.threads, "device": platform.processor() or "cpu",
           "reproducibility": {"seed": args.seed, "input_scale": args.input_scale},
           "provenance": timing.provenance(torch)}
    try:
        gen = torch.Generator().manual_seed(args.seed)
        q = (torch.randn(B, H, N, d, generator=gen) * args.input_scale).requires_grad_(True)
        k = (torch.randn(B, G, Nk, d, generator=gen) * args.input_scale).requires_grad_(True)
        v = (torch.randn(B, G, Nk, d, generator=gen) * args.input_scale).requires_grad_(True)
        dO = torch.randn(B, H, N, d, generator=gen)
        scale = 1.0 / math.sqrt(d)
        # True where row i may not see key j: j > i + N_k - N.
        mask = torch.ones(N, Nk, dtype=torch.bool).triu(1 + Nk - N) if causal else None
        lowest = torch.finfo(torch.float32).min
        held = {}

        def forward():
            kk, vv = (k, v) if G == H else (k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1))
            s = torch.matmul(q, kk.transpose(-1, -2)) * scale
            if mask is not None:
                s = s.masked_fill(mask, lowest)
            held["o"] = torch.matmul(torch.softmax(s, dim=-1), vv)

        def reset_grads():
            q.grad = k.grad = v.grad = None

        job = timing.Job("torch-cpu-standard",
                         [("fwd", lambda: wall_ms(forward)), ("bwd", lambda: wall_ms(lambda: held["o"].backward(dO)))],
                         before=reset_grads, after=held.clear)
        timing.interleave([job], args)
        if job.error is not None:
            raise job.error
        timed = job.summaries()
        fwd, bwd = timed["fwd"], timed["bwd"]
        flop = 4 * B * H * d * visible_pairs(N, Nk, causal)
        row["timing"] = timed
        row["throughput"] = {"fwd_tflops": flop / fwd["median_ms"] / 1e9,
                             "bwd_tflops": 2.5 * flop / bwd["median_ms"] / 1e9}
        row["flop"] = {"fwd": flop, "bwd": 2.5 * flop}
        row["bwd_over_fwd"] = bwd["median_ms"] / fwd["median_ms"]
        # What autograd keeps for backward: S (the product's output, for the mask/scale nodes) and P
        # (softmax's output, for its own backward and for P V's), each [B, H, N, N_k] fp32.
        row["memory"] = {"measured": None,
                         "model": {"kept_bytes": 2 * B * H * N * Nk * 4 + (B * H * N * Nk if causal else 0)}}
    except (RuntimeError, MemoryError) as e:
        row["status"], row["reason"] = "failed", (str(e).splitlines() or [e.__class__.__name__])[0][:200]
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



def openblas_core(cpuinfo="/proc/cpuinfo"):
    """The OpenBLAS kernel family this CPU runs at full width: SkylakeX needs AVX-512."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return "Haswell"
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Zen" if "AuthenticAMD" in text else "Haswell"
    return "Prescott"

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="JSON file to write")
    p.add_argument("--seq", type=int_list, default=[1024, 2048], help="comma list of N")
    p.add_argument("--seq-k", type=int, default=0, help="N_k, keys per sequence (default: N)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=0, help="G, key/value heads dividing --heads (default: H)")
    p.add_argument("--head-dim", type=int_list, default=[64], help="comma list of d")
    p.add_argument("--mask", choices=["false", "true", "both"], default="false")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--input-scale", type=float, default=1.0, help="Q, K, V are standard normal times this")
    timing.add_arguments(p, warmup=1, max_samples=50, max_time=10.0)
    p.add_argument("--seed", type=int, default=20261129)
    args = p.parse_args()
    kv_heads = args.kv_heads or args.heads
    if kv_heads < 1 or args.heads % kv_heads:
        p.error(f"--kv-heads {kv_heads} does not divide --heads {args.heads}")
    if not args.input_scale > 0:
        p.error("--input-scale must be a positive number")

    # Before torch loads its BLAS: see the module docstring.
    os.environ.setdefault("OPENBLAS_CORETYPE", openblas_core())
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)

    masks = {"false": [False], "true": [True], "both": [False, True]}[args.mask]
    rows = []
    for d in args.head_dim:
        for causal in masks:
            for n in args.seq:
                row = bench(torch, args.batch, args.heads, kv_heads, n, args.seq_k or n, d, causal, args)
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
                         "provenance": timing.provenance(torch),
                         "timing": {"protocol": "interleaved", "occupy_ms": None, "throttle_threshold": None,
                                    "clocks": f"not read: {NO_CLOCKS}"},
                         "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")},
                "rows": rows}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(document, fh, indent=1)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
