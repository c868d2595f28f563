"""Peer rows: PyTorch's scaled_dot_product_attention backends on the same shapes as a flashbench sweep.

For each N in --seq, with B = max(1, tokens // N), H query heads and G = --kv-heads key/value heads of
--head-dim, N_k = --seq-k keys (N when not given), causal and/or not, runs the SDPA backends math
(materialises P, like flashbench's `standard`), flash (FlashAttention-2), efficient
(memory-efficient attention) and cudnn (cuDNN fused attention), and writes rows in flashbench's JSON
contract (schema_version 1) with backend "torch-sdpa-<name>", so `compare` and the plot script put
them beside flashbench's rows. `variant` names the flashbench variant that keeps the same state (math:
standard; the fused ones: v2, O and LSE).

The operator is flashbench's: independent Q [B,H,N,d], K and V [B,G,N_k,d] and dO [B,H,N,d], i.i.d.
standard normal (Q, K, V times --input-scale), drawn in float32 from --seed and rounded to the dtype;
one configuration's backends share them. The backward returns dQ, dK and dV. G < H runs natively
(enable_gqa, each K/V head serving H/G query heads), or with --expand-kv the way code without GQA
does it: K and V repeated to H heads inside the timed forward (repeat_interleave; autograd sums the
repeated heads' gradients back). The causal mask is bottom-right aligned, as flashbench's (row i sees
keys j <= i + N_k - N): is_causal when N_k = N, torch's causal_lower_right bias otherwise.

Timing, the peers' protocol (timing.py, where each step's reason is given): a GPU spin of
--occupy-ms before every timed region, so that no sample starts from an idle GPU and the host's
dispatch hides under it, as under flashbench's own spin; CUDA events around each forward and each
backward (one sample = a forward, then the backward of its output; gradients reset outside the timed
regions); the backends of a configuration sampled in rounds (one sample of each a round, the order
rotated) after each one's warm-up, each until flashbench's rule holds (at least --min-samples, then
--max-samples, --max-time seconds of its samples, or the median's ~95% confidence half-width under
--max-noise); after every timed region the SM clock and the clock-event reasons are read (NVML, else
nvidia-smi). A sample below --throttle-threshold x the maximum SM clock, or with a power / thermal /
hardware slowdown reason, is throttled: each phase's summary counts them (throttled_samples) and
leaves them out of median_ms and the other statistics where --min-samples unthrottled ones remain
(excluded_samples); samples_ms, sm_clock_mhz and clock_event_reason_bits keep every sample.
Throughput: the FlashAttention convention, forward 4*B*H*N*N_k*d FLOP, backward 2.5x, times the
visible fraction of the causal mask.
Memory: peak_bytes is torch's max_memory_allocated during one forward+backward, inputs included
(q, k, v and dO); kept_bytes is what the forward left allocated beyond its output. Only the input and
kept tags are known.
--trace DIR: the measured forward and backward of each row as a memory_viz snapshot and a
Chrome/Perfetto trace, as `flashbench run --trace` writes them (memory_trace.py).
Every row and the file's meta carry `provenance`: torch, cuDNN, the CUDA runtime, the driver, the
GPU's name and UUID, and how its clocks were read.

Usage: python3 scripts/peers/torch_sdpa.py --out peers.json [--seq 1024,2048] [--tokens 16384]
       [--heads 16] [--kv-heads 16] [--seq-k N_k] [--expand-kv] [--head-dim 128] [--mask both]
       [--dtype bf16] [--input-scale 1] [--backends math,flash,efficient,cudnn] [--trace DIR]
       [--occupy-ms 0.5] [--throttle-threshold 0.95]
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_trace  # noqa: E402
import timing  # noqa: E402

try:  # what needs no GPU (the FLOP count, the options) imports without torch
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None

BACKEND_NAMES = ("math", "flash", "efficient", "cudnn")
VARIANTS = {"math": "standard", "flash": "v2", "efficient": "v2", "cudnn": "v2"}
DTYPE_NAMES = ("bf16", "fp16", "fp32")


def visible_pairs(seq, seq_k, causal):
    """Query-key pairs a row sees: all of N x N_k, or under the bottom-right causal mask (row i sees
    keys j <= i + N_k - N) the sum over rows of clamp(i + N_k - N + 1, 0, N_k)."""
    if not causal:
        return seq * seq_k
    return sum(min(seq_k, max(0, i + seq_k - seq + 1)) for i in range(seq))


def flop(batch, heads, seq, seq_k, head_dim, causal):
    """Forward FLOP by the FlashAttention convention: 4 per visible pair per head-dim element."""
    return 4 * batch * heads * head_dim * visible_pairs(seq, seq_k, causal)


def problem_of(B, H, G, N, Nk, d, causal, expand_kv, dtype_name):
    """A row's `problem`, every key flashbench writes (docs/json.md)."""
    return {"batch": B, "heads": H, "kv_heads": G, "seq": N, "seq_q": N, "seq_k": Nk, "head_dim": d, "layers": 1,
            "causal": causal, "dropout": 0.0, "expand_kv": bool(expand_kv and G < H), "dtype": dtype_name}


def status_of(error):
    """(status, reason) of an exception a backend raised."""
    first = (str(error).splitlines() or [error.__class__.__name__])[0][:200]
    if torch is not None and isinstance(error, torch.cuda.OutOfMemoryError):
        return "oom", first
    return "failed", first


def attention(q, k, v, causal, expand_kv):
    """O of the operator: SDPA on Q [B,H,N,d], K, V [B,G,N_k,d] (see the module docstring)."""
    H, G, N, Nk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    kwargs = {}
    if G < H:
        if expand_kv:
            k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
        else:
            kwargs["enable_gqa"] = True
    if causal and Nk == N:
        kwargs["is_causal"] = True
    elif causal:
        from torch.nn.attention.bias import causal_lower_right
        kwargs["attn_mask"] = causal_lower_right(N, Nk)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)


def draw_inputs(B, H, G, N, Nk, d, dtype, args):
    """Q, K, V (leaves with gradients) and dO, i.i.d. standard normal, Q, K, V times --input-scale."""
    gen = torch.Generator(device="cuda").manual_seed(args.seed)

    def normal(shape, scale):
        return (torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen) * scale).to(dtype)
    q = normal((B, H, N, d), args.input_scale).requires_grad_(True)
    k = normal((B, G, Nk, d), args.input_scale).requires_grad_(True)
    v = normal((B, G, Nk, d), args.input_scale).requires_grad_(True)
    do = normal((B, H, N, d), 1.0)
    return q, k, v, do


def measured_pass(name, row, tensors, causal, expand_kv, args):
    """The untimed pass of one backend: peak and kept bytes (and its trace with --trace)."""
    q, k, v, do = tensors
    input_bytes = sum(t.numel() * t.element_size() for t in tensors)
    p = row["problem"]
    trace_name = (f"{row['backend']}-B{p['batch']}-H{p['heads']}-G{p['kv_heads']}-N{p['seq']}-Nk{p['seq_k']}"
                  f"-d{p['head_dim']}-L1{'-causal' if causal else ''}{'-expand' if p['expand_kv'] else ''}-{p['dtype']}")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with memory_trace.Recording(args.trace, trace_name, f"{row['backend']} {trace_name}") as recording:
        with sdpa_kernel(getattr(SDPBackend, name)):
            o = attention(q, k, v, causal, expand_kv)
        torch.cuda.synchronize()
        kept = torch.cuda.memory_allocated() - base - o.numel() * o.element_size()
        recording.phase_boundary()
        o.backward(do)
        torch.cuda.synchronize()
    if recording.peak is not None and recording.peak != torch.cuda.max_memory_allocated():
        print(f"{trace_name}: the recorded history peaks at {recording.peak} bytes, torch's "
              f"max_memory_allocated says {torch.cuda.max_memory_allocated()}", file=sys.stderr)
    peak = torch.cuda.max_memory_allocated() - base + input_bytes
    q.grad = k.grad = v.grad = None
    del o
    return {"measured": {"peak_bytes": peak, "peak_phase": "bwd", "kept_bytes": kept,
                         "by_tag": {"input": input_bytes, "activation": None, "kept": kept,
                                    "workspace": None, "grad": None},
                         "os_peak_bytes": None}}


SDP_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                "cudnn": "CUDNN_ATTENTION"}


def job_of(name, tensors, causal, expand_kv, protocol):
    """One backend as a timing.Job: a forward, then the backward of its output, each a timed region."""
    q, k, v, do = tensors
    backend = getattr(SDPBackend, SDP_BACKENDS[name])
    held = {}

    def forward():
        held["o"] = attention(q, k, v, causal, expand_kv)

    def timed_forward():
        with sdpa_kernel(backend):
            return protocol.timed(forward)

    def timed_backward():
        return protocol.timed(lambda: held["o"].backward(do))

    def reset():
        q.grad = k.grad = v.grad = None

    def drop():
        held.clear()
    return timing.Job(name, [("fwd", timed_forward), ("bwd", timed_backward)], before=reset, after=drop)


def configuration(names, B, H, G, N, Nk, d, causal, dtype_name, expand_kv, args, protocol):
    """The rows of one configuration: every backend on the same inputs, sampled interleaved."""
    problem = problem_of(B, H, G, N, Nk, d, causal, expand_kv, dtype_name)
    provenance = protocol.provenance()
    rows = {name: {"backend": f"torch-sdpa-{name}", "variant": VARIANTS[name],
                   "problem": dict(problem), "status": "ok", "reason": "", "device": provenance["gpu_name"],
                   "reproducibility": {"seed": args.seed, "input_scale": args.input_scale},
                   "provenance": provenance}
            for name in names}
    tensors = None
    torch.cuda.empty_cache()
    try:
        tensors = draw_inputs(B, H, G, N, Nk, d, {"bf16": torch.bfloat16, "fp16": torch.float16,
                                                   "fp32": torch.float32}[dtype_name], args)
        jobs = []
        for name in names:
            try:
                rows[name]["memory"] = measured_pass(SDP_BACKENDS[name], rows[name], tensors, causal, expand_kv, args)
                jobs.append(job_of(name, tensors, causal, expand_kv, protocol))
            except Exception as error:  # noqa: BLE001 (OOM, no kernel for the shape, an argument refused)
                rows[name]["status"], rows[name]["reason"] = status_of(error)
                for t in tensors[:3]:
                    t.grad = None
                torch.cuda.empty_cache()
        protocol.run(jobs, args)
        fwd_flop = flop(B, H, N, Nk, d, causal)
        for job in jobs:
            row = rows[job.name]
            if job.error is not None:
                row["status"], row["reason"] = status_of(job.error)
                continue
            timed = protocol.summaries(job)
            fwd, bwd = timed["fwd"], timed["bwd"]
            row["timing"] = timed
            row["throughput"] = {"fwd_tflops": fwd_flop / fwd["median_ms"] / 1e9,
                                 "bwd_tflops": 2.5 * fwd_flop / bwd["median_ms"] / 1e9}
            row["flop"] = {"fwd": fwd_flop, "bwd": 2.5 * fwd_flop}
            row["bwd_over_fwd"] = bwd["median_ms"] / fwd["median_ms"]
    except RuntimeError as error:  # the inputs themselves did not fit
        for row in rows.values():
            if row["status"] == "ok" and "timing" not in row:
                row["status"], row["reason"] = status_of(error)
    finally:
        tensors = None
        torch.cuda.empty_cache()
    return [rows[name] for name in names]


def throttled(phase):
    """'3/40' throttled samples of a phase, '?/40' without clocks."""
    n = phase["throttled_samples"]
    return f"{'?' if n is None else n}/{phase['count']}"


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def backend_list(text):
    names = [x for x in text.split(",") if x]
    unknown = [x for x in names if x not in BACKEND_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown backend(s) {', '.join(unknown) or '(none)'}; "
                                         f"expected some of {', '.join(BACKEND_NAMES)}")
    return names


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--seq", type=int_list, default=int_list("1024,2048,4096,8192,16384,32768"))
    p.add_argument("--seq-k", type=int, default=0, help="N_k, keys per sequence (default: N)")
    p.add_argument("--tokens", type=int, default=16384, help="B = max(1, tokens // N)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=0, help="G, key/value heads dividing --heads (default: H)")
    p.add_argument("--expand-kv", action="store_true", help="G < H: repeat K and V to H heads instead of enable_gqa")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--mask", choices=["false", "true", "both"], default="both")
    p.add_argument("--dtype", choices=list(DTYPE_NAMES), default="bf16")
    p.add_argument("--input-scale", type=float, default=1.0, help="Q, K, V are standard normal times this")
    p.add_argument("--backends", type=backend_list, default=list(BACKEND_NAMES))
    timing.add_arguments(p, warmup=3, max_samples=100, max_time=2.0)
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--trace", help="write each row's memory_viz snapshot and Chrome trace into this directory")
    return p


def main():
    p = parser()
    args = p.parse_args()
    heads, kv_heads = args.heads, args.kv_heads or args.heads
    if kv_heads < 1 or heads % kv_heads:
        p.error(f"--kv-heads {kv_heads} does not divide --heads {heads}")
    if not args.input_scale > 0:
        p.error("--input-scale must be a positive number")
    if torch is None:
        p.error("needs PyTorch with CUDA (on the GPU machine)")
    protocol = timing.cuda_protocol(torch, args)
    if not protocol.clocks.available:
        print(f"torch_sdpa.py: no SM clocks per sample: {protocol.clocks.why_not}", file=sys.stderr)

    meta = run_meta(args, protocol)
    masks = {"false": [False], "true": [True], "both": [False, True]}[args.mask]
    rows = []
    for causal in masks:
        for N in args.seq:
            B = max(1, args.tokens // N)
            Nk = args.seq_k or N
            for row in configuration(args.backends, B, heads, kv_heads, N, Nk, args.head_dim, causal, args.dtype,
                                     args.expand_kv, args, protocol):
                rows.append(row)
                what = f"{row['backend']:22s} N={N:6d} B={B:2d} causal={int(causal)}"
                if row["status"] == "ok":
                    t = row["timing"]
                    print(f"{what} fwd {t['fwd']['median_ms']:9.3f} ms {row['throughput']['fwd_tflops']:6.1f} TF  "
                          f"bwd {t['bwd']['median_ms']:9.3f} ms {row['throughput']['bwd_tflops']:6.1f} TF  "
                          f"peak {row['memory']['measured']['peak_bytes'] / 2**30:8.2f} GiB  "
                          f"throttled {throttled(t['fwd'])}, {throttled(t['bwd'])}", flush=True)
                else:
                    print(f"{what} {row['status']}: {row.get('reason', '')}", flush=True)
            # After every configuration, so that a run cut short (a time limit, a lost node) keeps
            # the rows it made: meta.complete says whether it reached its end.
            write_results(args.out, meta, rows, complete=False)
    write_results(args.out, meta, rows, complete=True)


def run_meta(args, protocol):
    """The file's meta: the tool, torch, the GPU and its driver, the timing protocol, the start time."""
    provenance = protocol.provenance()
    gpu = {"name": provenance["gpu_name"], "uuid": provenance["gpu_uuid"],
           "driver_version": provenance["driver_version"], "runtime_version": provenance["cuda_runtime"],
           "index": protocol.index}
    gpu.update(protocol.clocks.meta())
    return {"tool": "torch_sdpa.py", "torch": torch.__version__, "argv": sys.argv, "gpu": gpu,
            "provenance": provenance, "timing": protocol.meta(),
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def write_results(path, meta, rows, complete):
    """The rows so far, whole or not at all (a temporary file renamed over the last one)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"schema_version": 1, "meta": {**meta, "complete": complete}, "rows": rows}, fh, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
