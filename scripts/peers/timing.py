"""Summaries of the peers' timing samples, in flashbench's JSON contract and by flashbench's rule.

The peer scripts beside this file import it (they put their own folder on sys.path).
"""
import math
import statistics
import time


def median_noise(samples):
    """Relative half-width of the distribution-free ~95% CI of the median (as flashbench computes it)."""
    n = len(samples)
    if n < 3:
        return 1.0
    s = sorted(samples)
    median = statistics.median(s)
    half = 1.96 * math.sqrt(n) / 2
    lower = s[max(0, min(n - 1, math.floor(n / 2 - half)))]
    upper = s[max(0, min(n - 1, math.ceil(n / 2 + half)))]
    return 0.5 * (upper - lower) / median if median > 0 else 1.0


def summary(samples):
    n = len(samples)
    mean = sum(samples) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in samples) / (n - 1)) if n > 1 else 0.0
    return {"median_ms": statistics.median(samples), "mean_ms": mean, "stddev_ms": std,
            "min_ms": min(samples), "max_ms": max(samples), "samples_ms": samples, "count": n,
            "median_noise": median_noise(samples)}


def sample(time_once, args, before=None):
    """Runs time_once() (which runs the work once and returns its milliseconds) args.warmup times
    untimed, then samples it until flashbench's stopping rule holds: at most args.max_samples, at
    least args.min_samples, and then until args.max_time seconds went by or the median's noise is at
    most args.max_noise. `before` runs untimed before every run. Returns summary(samples)."""
    for _ in range(args.warmup):
        if before:
            before()
        time_once()
    samples, t0 = [], time.perf_counter()
    while True:
        if before:
            before()
        samples.append(time_once())
        n, elapsed = len(samples), time.perf_counter() - t0
        if n >= args.max_samples:
            break
        if n >= args.min_samples and (elapsed >= args.max_time or median_noise(samples) <= args.max_noise):
            break
    return summary(samples)


def cuda_sample(fn, args, before=None):
    """sample() of fn() timed by CUDA events around each run (torch is imported here: the CPU peers
    need none). Nothing queued before the first run counts towards it."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def time_once():
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    torch.cuda.synchronize()
    return sample(time_once, args, before)


def add_arguments(parser, warmup, max_samples, max_time, per="configuration"):
    """The stopping rule's options, as flashbench run names them, with a script's own defaults."""
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed runs first")
    parser.add_argument("--min-samples", type=int, default=5)
    parser.add_argument("--max-samples", type=int, default=max_samples)
    parser.add_argument("--max-noise", type=float, default=0.02,
                        help="stop once the median's ~95%% confidence half-width is this fraction of it")
    parser.add_argument("--max-time", type=float, default=max_time, help=f"seconds of samples per {per}, at most")
