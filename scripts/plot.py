#!/usr/bin/env python3
"""Figures from flashbench results (the JSON contract, docs/json.md).

    scripts/plot.py RESULTS.json [MORE.json|.jsonl ...] --out DIR [--svg]

Writes into DIR:
  time_vs_seq.png        forward and backward median time against N (log-log), one line per variant
  memory_vs_seq.png      measured peak memory (markers) and the model's peak (lines) against N
  throughput_vs_seq.png  forward and backward TFLOP/s (FlashAttention convention) against N
  memory_by_tag.png      the measured peak split by tag (input, activation, kept, workspace, grad)
  bwd_over_fwd.png       backward / forward time against N, with seed 002's 1.5-2x band and 3x line
                         (the rule of thumb of that article, docs/articles.md)
Colour says the variant; line style and marker say the source (file and backend), so a CPU run, a
CUDA run and a peer's rows overlay. Rows whose status is not "ok" are left out. Needs numpy and
matplotlib (Debian: python3-matplotlib); runs headless.

--dump-series prints the series it would draw as JSON instead of drawing (for tests and scripts).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import ResultsError, read_results  # noqa: E402

TAGS = ["input", "activation", "kept", "workspace", "grad"]
VARIANT_COLOURS = {"standard": "#d62728", "v1": "#ff7f0e", "v2": "#2ca02c", "checkpoint": "#1f77b4"}
OTHER_COLOURS = ["#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
SOURCE_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (1, 1)), "P")]
TAG_COLOURS = {"input": "#8da0cb", "activation": "#66c2a5", "kept": "#fc8d62", "workspace": "#e78ac3",
               "grad": "#a6d854"}
BINARY_UNITS = [("B", 1), ("KiB", 1024), ("MiB", 1024 ** 2), ("GiB", 1024 ** 3), ("TiB", 1024 ** 4)]


class UsageError(Exception):
    pass


def number(value):
    """A positive finite float, or None (missing, null, zero)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def dig(record, *keys):
    for key in keys:
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


def shape_of(problem, with_batch=True):
    """Every axis but N, as a label: "B=1 H=8 d=64 L=1 fp32" (+ " causal", and "G=", "Nk=",
    "expand-kv", "dropout=" where a row has them, docs/workloads.md)."""
    text = f"B={problem.get('batch')} " if with_batch else ""
    heads = problem.get("heads")
    text += f"H={heads}"
    if problem.get("kv_heads", heads) != heads:
        text += f" G={problem.get('kv_heads')}"
    text += f" d={problem.get('head_dim')} L={problem.get('layers', 1)}"
    if problem.get("causal"):
        text += " causal"
    # N_k joins the label only where it is fixed apart from N (a sweep over N with N_k = N is one series).
    if "seq_k" in problem and problem.get("seq_k") != problem.get("seq"):
        text += f" Nk={problem.get('seq_k')}"
    if problem.get("expand_kv"):
        text += " expand-kv"
    if problem.get("dropout"):
        text += f" dropout={problem.get('dropout'):g}"
    return text + f" {problem.get('dtype', 'fp32')}"


def source_names(loaded):
    """A name per (file, backend): the backend alone when no other file has it, else "file: backend"."""
    files_of = {}
    for path, _, rows in loaded:
        for row in rows:
            files_of.setdefault(row.get("backend", "?"), set()).add(path)
    names = {}
    for path, _, rows in loaded:
        for row in rows:
            backend = row.get("backend", "?")
            names[(path, backend)] = backend if len(files_of[backend]) == 1 else f"{os.path.basename(path)}: {backend}"
    return names


def point_of(row):
    measured = dig(row, "memory", "measured") or {}
    return {
        "seq": int(row["problem"]["seq"]),
        "batch": row["problem"].get("batch"),
        "fwd_ms": number(dig(row, "timing", "fwd", "median_ms")),
        "bwd_ms": number(dig(row, "timing", "bwd", "median_ms")),
        "fwd_tflops": number(dig(row, "throughput", "fwd_tflops")),
        "bwd_tflops": number(dig(row, "throughput", "bwd_tflops")),
        "peak_bytes": number(measured.get("peak_bytes")),
        "model_peak_bytes": number(dig(row, "memory", "model", "peak_bytes")),
        "by_tag": {tag: (dig(measured, "by_tag", tag) or 0) for tag in TAGS},
    }


def collect_series(paths):
    """(sources, series): series keyed by (source, variant, shape label), points sorted by N.

    Rows that differ only in N form one series. A peer that scales the batch with N (constant
    B·N tokens) would give one point per batch; series that differ only in the batch and share no
    N are therefore joined, and the label says how the batch went.
    """
    loaded = []
    for path in paths:
        results = read_results(path)
        ok = [r for r in results.rows if r.get("status") == "ok" and number(dig(r, "problem", "seq")) is not None]
        loaded.append((path, results.meta, ok))
    names = source_names(loaded)
    groups = {}  # (source, variant, shape without batch) -> {batch: [points]}
    sources = []
    for path, _, rows in loaded:
        for row in rows:
            source = names[(path, row.get("backend", "?"))]
            if source not in sources:
                sources.append(source)
            # One series per implementation ("v2", "v2.split"); files older than implementations
            # carry the variant only.
            key = (source, row.get("impl") or row.get("variant", "?"), shape_of(row["problem"], with_batch=False))
            groups.setdefault(key, {}).setdefault(row["problem"].get("batch"), []).append(point_of(row))
    series = {}
    for (source, variant, shape), by_batch in groups.items():
        seqs = [p["seq"] for points in by_batch.values() for p in points]
        if len(by_batch) > 1 and len(seqs) == len(set(seqs)):
            points = [p for points in by_batch.values() for p in points]
            tokens = {p["seq"] * p["batch"] for p in points if isinstance(p["batch"], int)}
            batch = f"B*N={tokens.pop()}" if len(tokens) == 1 else "B varies"
            series[(source, variant, f"{batch} {shape}")] = points
        else:
            for b, points in by_batch.items():
                series[(source, variant, f"B={b} {shape}")] = points
    for points in series.values():
        points.sort(key=lambda p: p["seq"])
    return sources, series


def series_label(key, series):
    """ "v2 (cpu)", with the shape when that source has more than one shape."""
    source, variant, shape = key
    shapes = {k[2] for k in series if k[0] == source}
    return f"{variant} ({source}{', ' + shape if len(shapes) > 1 else ''})"


def style_for(key, sources, variants):
    source, variant, _ = key
    line, marker = SOURCE_STYLES[sources.index(source) % len(SOURCE_STYLES)]
    if variant in VARIANT_COLOURS:
        colour = VARIANT_COLOURS[variant]
    else:
        colour = OTHER_COLOURS[variants.index(variant) % len(OTHER_COLOURS)]
    return {"color": colour, "linestyle": line, "marker": marker}


def byte_unit(largest):
    """The binary unit (name, size) that keeps `largest` between 1 and 1024."""
    for name, size in reversed(BINARY_UNITS):
        if largest >= size:
            return name, size
    return BINARY_UNITS[0]


def draw(paths, out_dir, svg):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sources, series = collect_series(paths)
    if not series:
        raise RuntimeError("no ok rows to plot")
    variants = sorted({key[1] for key in series})
    os.makedirs(out_dir, exist_ok=True)
    written = []

    def save(figure, name, bottom=0.0):
        figure.tight_layout(rect=(0, bottom, 1, 1))
        for extension in (["png", "svg"] if svg else ["png"]):
            path = os.path.join(out_dir, f"{name}.{extension}")
            figure.savefig(path, dpi=130)
            written.append(path)
        plt.close(figure)

    def line_plot(axis, value, y_scale="log", **extra):
        drawn = False
        for key, points in series.items():
            xs = [p["seq"] for p in points if p[value] is not None]
            ys = [p[value] for p in points if p[value] is not None]
            if not xs:
                continue
            style = style_for(key, sources, variants)
            style.update(extra)
            axis.plot(xs, ys, label=series_label(key, series), **style)
            drawn = True
        axis.set_xscale("log", base=2)
        axis.set_yscale(y_scale)
        axis.set_xlabel("sequence length N")
        axis.grid(True, which="both", alpha=0.3)
        return drawn

    def save_with_legend(figure, axes, name):
        """The first axis' legend below the plots, in up to two columns; the figure grows to fit."""
        handles, labels = axes[0].get_legend_handles_labels()
        legend_rows = math.ceil(len(labels) / 2)
        legend_height = 0.25 * legend_rows + 0.2  # [inches]
        figure.set_figheight(figure.get_figheight() + legend_height)
        if handles:
            figure.legend(handles, labels, loc="lower center", ncol=min(2, len(labels)), fontsize=8, frameon=False)
        save(figure, name, bottom=legend_height / figure.get_figheight())

    # Time against N.
    figure, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharey=True)
    for axis, phase in zip(axes, ("fwd", "bwd")):
        line_plot(axis, f"{phase}_ms")
        axis.set_title(f"{'forward' if phase == 'fwd' else 'backward'} time (median)")
    axes[0].set_ylabel("time [ms]")
    save_with_legend(figure, axes, "time_vs_seq")

    # Peak memory against N: measured as markers only, the model as lines.
    figure, axis = plt.subplots(figsize=(8, 6))
    # Hollow rings of decreasing size, so variants with equal peaks stay visible.
    for key, points in series.items():
        xs = [p["seq"] for p in points if p["peak_bytes"] is not None]
        ys = [p["peak_bytes"] for p in points if p["peak_bytes"] is not None]
        if xs:
            style = style_for(key, sources, variants)
            axis.plot(xs, ys, linestyle="none", marker=style["marker"], color=style["color"], markerfacecolor="none",
                      markeredgewidth=1.5, markersize=11 - 2 * (variants.index(key[1]) % 4),
                      label=series_label(key, series))
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("sequence length N")
    axis.grid(True, which="both", alpha=0.3)
    for key, points in series.items():
        xs = [p["seq"] for p in points if p["model_peak_bytes"] is not None]
        ys = [p["model_peak_bytes"] for p in points if p["model_peak_bytes"] is not None]
        if xs:
            style = style_for(key, sources, variants)
            axis.plot(xs, ys, color=style["color"], linestyle=style["linestyle"], marker=None, alpha=0.6,
                      label=f"model: {series_label(key, series)}")
    axis.set_ylabel("peak memory [bytes]")
    axis.set_title("peak memory: measured (markers), model (lines)")
    save_with_legend(figure, [axis], "memory_vs_seq")

    # Throughput against N.
    figure, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharey=True)
    for axis, phase in zip(axes, ("fwd", "bwd")):
        line_plot(axis, f"{phase}_tflops")
        axis.set_title(f"{'forward' if phase == 'fwd' else 'backward'} throughput")
    axes[0].set_ylabel("TFLOP/s (FlashAttention convention)")
    save_with_legend(figure, axes, "throughput_vs_seq")

    # bwd / fwd against N, with seed 002's rule of thumb (docs/articles.md).
    figure, axis = plt.subplots(figsize=(8, 6))
    for key, points in series.items():
        pairs = [(p["seq"], p["bwd_ms"] / p["fwd_ms"]) for p in points if p["bwd_ms"] and p["fwd_ms"]]
        if pairs:
            axis.plot(*zip(*pairs), label=series_label(key, series), **style_for(key, sources, variants))
    axis.axhspan(1.5, 2.0, color="#2ca02c", alpha=0.12, label="seed 002: 1.5-2x normal")
    axis.axhline(3.0, color="#d62728", linestyle="--", linewidth=1, label="seed 002: > 3x too much recompute")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("sequence length N")
    axis.set_ylabel("backward time / forward time")
    axis.set_title("bwd / fwd")
    axis.grid(True, which="both", alpha=0.3)
    save_with_legend(figure, [axis], "bwd_over_fwd")

    # The measured peak split by tag, at up to four N (smallest, largest and evenly between), one
    # panel each with its own scale: one bar per series, stacked by tag.
    def has_tags(point):
        return point["peak_bytes"] and sum(point["by_tag"].values()) > 0

    bar_series = [key for key, points in series.items() if any(has_tags(p) for p in points)]
    all_seq = sorted({p["seq"] for key in bar_series for p in series[key] if has_tags(p)})
    if all_seq:
        from matplotlib.patches import Patch

        picks = sorted({round(i * (len(all_seq) - 1) / 3) for i in range(4)}) if len(all_seq) > 4 else range(len(all_seq))
        chosen = [all_seq[i] for i in picks]
        figure, axes = plt.subplots(1, len(chosen), figsize=(3.2 * len(chosen) + 1.5, 5.5), squeeze=False)
        for axis, n in zip(axes[0], chosen):
            present = [key for key in bar_series if any(p["seq"] == n and has_tags(p) for p in series[key])]
            points = [next(p for p in series[key] if p["seq"] == n) for key in present]
            unit, unit_bytes = byte_unit(max(p["peak_bytes"] for p in points))
            xs = np.arange(len(present))
            bottom = np.zeros(len(present))
            for tag in TAGS:
                heights = np.array([p["by_tag"][tag] / unit_bytes for p in points], dtype=float)
                axis.bar(xs, heights, 0.7, bottom=bottom, color=TAG_COLOURS[tag],
                         edgecolor=[style_for(key, sources, variants)["color"] for key in present], linewidth=1.5)
                bottom += heights
            axis.set_xticks(xs)
            axis.set_xticklabels([key[1] if len(sources) == 1 else f"{key[1]}\n{key[0]}" for key in present],
                                 rotation=45, ha="right", fontsize=8)
            axis.set_title(f"N = {n}")
            axis.set_ylabel(f"live at the peak [{unit}]")
            axis.grid(True, axis="y", alpha=0.3)
        figure.suptitle("measured peak memory by tag")
        figure.legend(handles=[Patch(facecolor=TAG_COLOURS[tag], label=tag) for tag in TAGS], loc="center right",
                      fontsize=8, frameon=False)
        figure.tight_layout(rect=(0, 0, 1 - 1.3 / figure.get_figwidth(), 1))
        for extension in (["png", "svg"] if svg else ["png"]):
            path = os.path.join(out_dir, f"memory_by_tag.{extension}")
            figure.savefig(path, dpi=130)
            written.append(path)
        plt.close(figure)
    return written


def main(argv):
    parser = argparse.ArgumentParser(description="Figures from flashbench JSON results.")
    parser.add_argument("results", nargs="+", help="results files (.json or .jsonl)")
    parser.add_argument("--out", help="output folder for the figures")
    parser.add_argument("--svg", action="store_true", help="also write SVG")
    parser.add_argument("--dump-series", action="store_true", help="print the series as JSON, draw nothing")
    args = parser.parse_args(argv)
    try:
        if args.dump_series:
            sources, series = collect_series(args.results)
            dumped = [{"source": k[0], "variant": k[1], "shape": k[2], "points": v} for k, v in series.items()]
            print(json.dumps({"sources": sources, "series": dumped}, indent=1))
            return 0
        if not args.out:
            raise UsageError("--out DIR is required")
        for path in draw(args.results, args.out, args.svg):
            print(path)
        return 0
    except (UsageError, ResultsError) as error:
        print(f"plot.py: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:
        print(f"plot.py: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
