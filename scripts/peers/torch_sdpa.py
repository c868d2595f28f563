"""Peer rows: PyTorch's scaled_dot_product_attention backends on the same shapes as a flashbench sweep.

For each N in --seq, with B = max(1, tokens // N), H heads of --head-dim, causal and/or not, runs the
SDPA backends math (materialises P, like flashbench's `standard`), flash (FlashAttention-2),
efficient (memory-efficient attention) and cudnn (cuDNN fused attention), and writes rows in
flashbench's JSON contract (schema_version 1) with backend "torch-sdpa-<name>", so `compare` and the
plot script put them beside flashbench's rows. `variant` names the flashbench variant that keeps the
same state (math: standard; the fused ones: v2, O and LSE).

Timing: CUDA events around each forward and each backward (retain_graph, gradients reset outside the
timed region), warm-up first, samples until the median's ~95% confidence half-width is under
--max-noise or --max-time seconds went by (at least --min-samples). Throughput: the FlashAttention
convention, forward 4*B*H*N^2*d FLOP, backward 2.5x, halved when causal.
Memory: peak_bytes is torch's max_memory_allocated during one forward+backward, inputs included
(q, k, v are three tensors here, where flashbench's self-attention stack has one X); kept_bytes is what
the forward left allocated beyond its output. Only the input and kept tags are known.
--trace DIR: the measured forward and backward of each row as a memory_viz snapshot and a
Chrome/Perfetto trace, as `flashbench run --trace` writes them (memory_trace.py).

Usage: python3 scripts/peers/torch_sdpa.py --out peers.json [--seq 1024,2048] [--tokens 16384]
       [--heads 16] [--head-dim 128] [--mask both] [--dtype bf16] [--backends math,flash,efficient,cudnn]
       [--trace DIR]
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_trace  # noqa: E402
import timing  # noqa: E402

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "math": (SDPBackend.MATH, "standard"),
    "flash": (SDPBackend.FLASH_ATTENTION, "v2"),
    "efficient": (SDPBackend.EFFICIENT_ATTENTION, "v2"),
    "cudnn": (SDPBackend.CUDNN_ATTENTION, "v2"),
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def bench(name, B, H, N, d, causal, dtype_name, args):
    backend, variant = BACKENDS[name]
    dtype = DTYPES[dtype_name]
    row = {"backend": f"torch-sdpa-{name}", "variant": variant,
           "problem": {"batch": B, "heads": H, "seq": N, "head_dim": d, "layers": 1, "causal": causal,
                       "dtype": dtype_name},
           "status": "ok", "device": torch.cuda.get_device_name()}
    torch.cuda.empty_cache()
    try:
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        q = torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=gen, requires_grad=True)
        k = torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=gen, requires_grad=True)
        v = torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=gen, requires_grad=True)
        dO = torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=gen)
        input_bytes = 4 * q.numel() * q.element_size()
        trace_name = (f"{row['backend']}-B{B}-H{H}-N{N}-d{d}-L1{'-causal' if causal else ''}-{dtype_name}")
        with sdpa_kernel(backend):
            f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            with memory_trace.Recording(args.trace, trace_name, f"{row['backend']} {trace_name}") as recording:
                o = f()
                torch.cuda.synchronize()
                kept = torch.cuda.memory_allocated() - base - o.numel() * o.element_size()
                recording.phase_boundary()
                o.backward(dO)
                torch.cuda.synchronize()
            if recording.peak is not None and recording.peak != torch.cuda.max_memory_allocated():
                print(f"{trace_name}: the recorded history peaks at {recording.peak} bytes, torch's "
                      f"max_memory_allocated says {torch.cuda.max_memory_allocated()}", file=sys.stderr)
            peak = torch.cuda.max_memory_allocated() - base + input_bytes
            q.grad = k.grad = v.grad = None
            del o
            fwd = timing.cuda_sample(f, args)
            o = f()

            def reset_grads():
                q.grad = k.grad = v.grad = None

            bwd = timing.cuda_sample(lambda: o.backward(dO, retain_graph=True), args, before=reset_grads)
            del o
        flop = 4 * B * H * N * N * d * (0.5 if causal else 1.0)
        row["timing"] = {"fwd": fwd, "bwd": bwd}
        row["throughput"] = {"fwd_tflops": flop / fwd["median_ms"] / 1e9,
                             "bwd_tflops": 2.5 * flop / bwd["median_ms"] / 1e9}
        row["bwd_over_fwd"] = bwd["median_ms"] / fwd["median_ms"]
        row["memory"] = {"measured": {"peak_bytes": peak, "peak_phase": "bwd", "kept_bytes": kept,
                                      "by_tag": {"input": input_bytes, "activation": None, "kept": kept,
                                                 "workspace": None, "grad": None},
                                      "os_peak_bytes": None}}
    except torch.cuda.OutOfMemoryError as e:
        row["status"], row["reason"] = "oom", str(e).splitlines()[0][:200]
    except RuntimeError as e:
        row["status"], row["reason"] = "failed", str(e).splitlines()[0][:200]
    finally:
        q = k = v = dO = None
        torch.cuda.empty_cache()
    return row


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--seq", type=int_list, default=int_list("1024,2048,4096,8192,16384,32768"))
    p.add_argument("--tokens", type=int, default=16384, help="B = max(1, tokens // N)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--mask", choices=["false", "true", "both"], default="both")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--backends", default=",".join(BACKENDS))
    timing.add_arguments(p, warmup=3, max_samples=100, max_time=2.0)
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--trace", help="write each row's memory_viz snapshot and Chrome trace into this directory")
    args = p.parse_args()

    masks = {"false": [False], "true": [True], "both": [False, True]}[args.mask]
    rows = []
    for causal in masks:
        for N in args.seq:
            B = max(1, args.tokens // N)
            for name in args.backends.split(","):
                row = bench(name, B, args.heads, N, args.head_dim, causal, args.dtype, args)
                rows.append(row)
                if row["status"] == "ok":
                    t = row["timing"]
                    print(f"{row['backend']:22s} N={N:6d} B={B:2d} causal={int(causal)} "
                          f"fwd {t['fwd']['median_ms']:9.3f} ms {row['throughput']['fwd_tflops']:6.1f} TF  "
                          f"bwd {t['bwd']['median_ms']:9.3f} ms {row['throughput']['bwd_tflops']:6.1f} TF  "
                          f"peak {row['memory']['measured']['peak_bytes'] / 2**30:8.2f} GiB", flush=True)
                else:
                    print(f"{row['backend']:22s} N={N:6d} B={B:2d} causal={int(causal)} {row['status']}: "
                          f"{row.get('reason', '')}", flush=True)
    meta = {"tool": "torch_sdpa.py", "torch": torch.__version__, "argv": sys.argv,
            "gpu": {"name": torch.cuda.get_device_name()},
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    with open(args.out, "w") as fh:
        json.dump({"schema_version": 1, "meta": meta, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
