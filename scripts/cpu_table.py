#!/usr/bin/env python3
"""The CPU benchmark's table, from the files scripts/cpu-bench.sh leaves in its OUTPUT_DIR.

    scripts/cpu_table.py OUTPUT_DIR

Reads peak-{before,between,after}.json (`flashbench info --peak --format json`), load-*.txt,
flashbench.json, torch-cpu.json (the PyTorch peer, when present), causal-*.json and scaling-t*.json,
and prints: the load averages and the ceilings; per implementation and shape, forward and backward
GFLOP/s, % of the sgemm ceiling and the time ratio against the peer (peer time / our time: above 1
means flashbench is faster); the kernels' matrix products; the causal / non-causal pairs; the thread
scaling. Every rate is the row's own throughput (GFLOP/s = 1000 x the row's TFLOP/s), as flashbench
and the peer counted it. Rows are named by "impl", or by "variant" in files from before "impl";
a peer's rows by their backend. Exit status 2 when a file cannot be read (one line on stderr).
"""
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import (ResultsError, gflops, is_peer, median_ms, name_of, read_json,  # noqa: E402
                     read_results, variant_rank)

PHASES = ("before", "between", "after")


def shape_key(row):
    p = row["problem"]
    return (p["batch"], p["heads"], p["seq"], p["head_dim"], p.get("layers", 1), p["causal"])


def read_peaks(out):
    peaks = []
    for phase in PHASES:
        path = os.path.join(out, f"peak-{phase}.json")
        document = read_json(path)
        if not isinstance(document, dict) or not isinstance(document.get("peak"), dict):
            raise ResultsError(f"'{path}' has no \"peak\": not `flashbench info --peak --format json` output")
        peaks.append(document["peak"])
    return peaks


def read_loads(out):
    loads = []
    for phase in PHASES:
        try:
            with open(os.path.join(out, f"load-{phase}.txt"), encoding="utf-8") as handle:
                loads.append(handle.read().strip() or "?")
        except OSError:
            loads.append("?")
    return loads


def ok_rows(path):
    return [r for r in read_results(path).rows if r.get("status") == "ok"]


def cell(value, spec, width):
    return f"{format(value, spec) if value is not None else '-':>{width}}"


def main_table(peaks, loads, ours, peer):
    """The header lines and one line per implementation and shape."""
    def sgemm(p):
        return max(p["sgemm_gflops"], p.get("openblas_sgemm_gflops") or 0.0)

    peak = max(sgemm(p) for p in peaks)
    fma = max(p["fma_gflops"] for p in peaks)
    t = peaks[0]["threads"]
    blas = max(p.get("openblas_sgemm_gflops") or 0.0 for p in peaks)
    lines = [
        f"CPU, {t} threads; 1-minute load average before/between/after the sweep: {' / '.join(loads)}"
        f" (before: other work only; between and after include this run's own {t} threads. Above 0 before,"
        f" or above {t} later, other work shared the cores: every figure below is then a lower bound).",
        f"Ceilings (median of repetitions, highest of the three measurements around the sweep): "
        f"FMA {fma:.0f} GFLOP/s; sgemm {peak:.0f} GFLOP/s "
        f"(flashbench gemm {max(p['sgemm_gflops'] for p in peaks):.0f}, OpenBLAS "
        + (f"{blas:.0f} [{peaks[0].get('openblas_core')}]" if blas else "not built in")
        + f", {peaks[0]['sgemm_size']}^3).",
        "GFLOP/s: the rows' own throughput (FlashAttention convention, causal counting the useful half),"
        " medians; %pk = % of the sgemm ceiling; vs torch = PyTorch time / flashbench time (>1: flashbench faster).",
    ]
    peer_by_key = {shape_key(r): r for r in peer}
    shown = ours + list(peer_by_key.values())
    width = max([11] + [len(name_of(r)) + 1 for r in shown])
    name = "impl" if any("impl" in r for r in shown) else "variant"
    header = (f"{name:<{width}}{'N':>6}{'d':>5}{'causal':>7} | {'fwd GF/s':>9}{'%pk':>5}{'vs torch':>9} | "
              f"{'bwd GF/s':>9}{'%pk':>5}{'vs torch':>9} | {'bwd/fwd':>7}")
    lines += [header, "-" * len(header)]
    shown.sort(key=lambda r: (r["problem"]["causal"], r["problem"]["head_dim"], r["problem"]["seq"],
                              is_peer(r), variant_rank(r), name_of(r)))
    for r in shown:
        p = r["problem"]
        ref = None if is_peer(r) else peer_by_key.get(shape_key(r))
        cells = []
        for phase in ("fwd", "bwd"):
            g = gflops(r, phase)
            ratio = None
            if ref and median_ms(ref, phase) and median_ms(r, phase):
                ratio = median_ms(ref, phase) / median_ms(r, phase)
            cells.append(cell(g, ".1f", 9) + cell(100 * g / peak if g else None, ".0f", 5)
                         + f"{(f'{ratio:.2f}x' if ratio else '-'):>9}")
        bwd_over_fwd = r.get("bwd_over_fwd")
        if not isinstance(bwd_over_fwd, (int, float)) and median_ms(r, "fwd") and median_ms(r, "bwd"):
            bwd_over_fwd = median_ms(r, "bwd") / median_ms(r, "fwd")
        lines.append(f"{name_of(r):<{width}}{p['seq']:>6}{p['head_dim']:>5}{str(p['causal']).lower():>7} | "
                     f"{cells[0]} | {cells[1]} | {cell(bwd_over_fwd, '.2f', 7)}")
    return lines


def products_table(peaks):
    products = peaks[0].get("products") or []
    if not products:
        return []
    lines = ["", "The kernels' matrix products (N=2048, d=64), 1 thread, GFLOP/s: flashbench gemm / OpenBLAS sgemm"]
    for p in products:
        blas = p.get("openblas_gflops_1thread")
        lines.append(f"  {p['name']:<36} {p['ops']} {p['M']:>4}x{p['N']}x{p['K']:<5} {p['gflops_1thread']:6.1f}"
                     + (f" / {blas:6.1f} = {p['gflops_1thread'] / blas:.2f}" if blas else ""))
    return lines


def causal_pairs(out):
    """{(impl, seq, d, phase): [causal rate / non-causal rate per back-to-back pair]}."""
    pairs = {}
    for path in sorted(glob.glob(os.path.join(out, "causal-*.json"))):
        by = {}
        for r in ok_rows(path):
            by[(name_of(r), r["problem"]["causal"])] = r
        for (name, causal), r in by.items():
            other = by.get((name, False))
            if not causal or other is None:
                continue
            p = r["problem"]
            for phase in ("fwd", "bwd"):
                if gflops(r, phase) and gflops(other, phase):
                    pairs.setdefault((name, p["seq"], p["head_dim"], phase), []).append(
                        gflops(r, phase) / gflops(other, phase))
    return pairs


def causal_table(out):
    pairs = causal_pairs(out)
    if not pairs:
        return []
    names = sorted({key[0] for key in pairs})
    lines = ["", f"{', '.join(names)} causal / non-causal GFLOP/s per useful FLOP (causal counts half the FLOPs),"
             " back-to-back pairs: median [min, max] over rounds; target >= 1"]
    for (name, seq, d, phase), ratios in sorted(pairs.items()):
        prefix = f"{name:<10}" if len(names) > 1 else ""
        lines.append(f"  {prefix}N={seq:<6} d={d:<4} {phase}: {statistics.median(ratios):.3f}"
                     f" [{min(ratios):.3f}, {max(ratios):.3f}] over {len(ratios)} pairs")
    return lines


def scaling_table(out):
    scaling = {}
    for path in glob.glob(os.path.join(out, "scaling-t*.json")):
        match = re.search(r"scaling-t(\d+)\.json$", path)
        for r in ok_rows(path):
            threads = r.get("threads") if isinstance(r.get("threads"), int) else int(match.group(1))
            scaling[(name_of(r), threads)] = r
    if not scaling:
        return []
    counts = sorted({t for _, t in scaling})
    some = next(iter(scaling.values()))["problem"]
    lines = ["", f"Thread scaling (N={some['seq']} d={some['head_dim']}, B={some['batch']} H={some['heads']}):"
             " GFLOP/s and parallel efficiency = speed-up / threads, against 1 thread"]
    names = sorted({name for name, _ in scaling},
                   key=lambda name: (min(variant_rank(r) for (n, _), r in scaling.items() if n == name), name))
    for name in names:
        for phase in ("fwd", "bwd"):
            base = scaling.get((name, 1))
            cells = []
            for t in counts:
                r = scaling.get((name, t))
                g = gflops(r, phase) if r else None
                if g is None:
                    continue
                eff = f" ({100 * g / gflops(base, phase) / t:.0f}%)" if base and gflops(base, phase) else ""
                cells.append(f"{t}T {g:.0f}{eff}")
            lines.append(f"  {name:<9}{phase}: " + ", ".join(cells))
    return lines


def table(out):
    """Every line of the table for the files in OUTPUT_DIR `out`."""
    peaks = read_peaks(out)
    ours_all = read_results(os.path.join(out, "flashbench.json")).rows
    peer_path = os.path.join(out, "torch-cpu.json")
    peer = ok_rows(peer_path) if os.path.exists(peer_path) else []
    lines = main_table(peaks, read_loads(out), [r for r in ours_all if r.get("status") == "ok"], peer)
    for r in ours_all:
        if r.get("status") != "ok":
            lines.append(f"{name_of(r)} {r.get('problem')}: {r.get('status')} {r.get('reason', '')}")
    return lines + products_table(peaks) + causal_table(out) + scaling_table(out)


def main(argv):
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: scripts/cpu_table.py OUTPUT_DIR", file=sys.stderr)
        return 2
    try:
        lines = table(argv[0])
    except ResultsError as error:
        print(f"cpu_table.py: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
