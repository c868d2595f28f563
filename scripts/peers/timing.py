"""Summaries of the peers' timing samples, in flashbench's JSON contract and by flashbench's rule.

The peer scripts beside this file import it (they put their own folder on sys.path).
"""
import math
import statistics


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
