#!/usr/bin/env python3
"""Figures from flashbench results (the JSON contract, docs/json.md).

    scripts/plot.py RESULTS.json [MORE.json|.jsonl ...] --out DIR [--svg] [--where KEY=VALUE ...]
                    [--describe FIGURES.json]

Writes into DIR:
  time_vs_seq.png        forward and backward median time against N (log-log), one line per implementation
  memory_vs_seq.png      measured peak memory (markers) and the model's peak (lines) against N, in the binary
                         unit its largest value reads in (MiB, GiB, ...)
  throughput_vs_seq.png  forward, backward and forward+backward rate against N, linear, as FlashAttention's
                         benchmark plots: TFLOP/s on a GPU, GFLOP/s on the CPU (and % of the sgemm ceiling
                         when the rows carry one); the FLOP counts are the rows' own
  speedup_vs_seq.png     forward, backward and forward+backward time of `standard` over each implementation's,
                         against N, where flashbench's `standard` ran the same problem on the same device
  memory_by_tag.png      the measured peak split by tag (input, activation, kept, workspace, grad), at up to
                         four N; what the row's tags leave unexplained (a peer knows only some) is an
                         "unattributed" segment, so every bar stands at the measured peak
  bwd_over_fwd.png       backward / forward time against N, with the 1.5-2x band and 3x line of a source
                         article's rule of thumb (docs/articles.md)

Every figure is titled with what its rows ran on: device, dtype, d, H, B (or B·N when the batch scales
with N), mask, threads on the CPU, and L, G, N_k or dropout where they are not the default; an axis
whose rows differ lists its values ("d = 64, 128"). Time and rate are medians, and the band around
each line spans the fastest to the slowest sample (min-max of `samples_ms`). Colour says the
implementation (the same in every figure: peers by their backend, flashbench's rows by `impl`); line
style and marker say the source (file and backend). Rows whose status is not "ok" are left out.

--where KEY=VALUE keeps the rows whose problem has that value (`--where causal=false --where
head_dim=128`); --describe writes, as JSON, what each figure drew: its file, title, legend, each
panel's labels, lines, bands and bars, read back from the drawn figure. --dump-series prints the
series it would draw as JSON instead of drawing.

Needs numpy and matplotlib (Debian: apt-get install python3-matplotlib) to draw; runs headless.
"""
import argparse
import json
import math
import os
import sys
import textwrap
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import (ResultsError, flop, is_peer, median_ms, name_of, read_results,  # noqa: E402
                     samples_ms)

TAGS = ["input", "activation", "kept", "workspace", "grad"]
UNATTRIBUTED = "unattributed"
# One colour per implementation name, in every figure; names not listed take one of OTHER_COLOURS by a
# hash of the name, so they too keep their colour from figure to figure and run to run.
IMPL_COLOURS = {
    "standard": "#d62728", "v1": "#ff7f0e", "v2": "#2ca02c", "checkpoint": "#1f77b4",
    "v2.split": "#98df8a", "v2.whole": "#006d2c", "v2.mma": "#bcbd22", "cudnn": "#17becf",
    "torch-sdpa-math": "#8c564b", "torch-sdpa-flash": "#9467bd", "torch-sdpa-efficient": "#e377c2",
    "torch-sdpa-cudnn": "#000000", "torch-cpu-standard": "#7f7f7f",
}
OTHER_COLOURS = ["#aec7e8", "#ffbb78", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5"]
SOURCE_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (1, 1)), "P")]
TAG_COLOURS = {"input": "#8da0cb", "activation": "#66c2a5", "kept": "#fc8d62", "workspace": "#e78ac3",
               "grad": "#a6d854", UNATTRIBUTED: "#d9d9d9"}
GIB = float(1 << 30)
BAND_NOTE = "band: min-max of the samples"
PHASES = (("fwd", "forward"), ("bwd", "backward"), ("total", "forward + backward"))
PROBLEM_DEFAULTS = {"layers": 1, "causal": False, "dropout": 0.0, "expand_kv": False, "dtype": "fp32"}


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


def colour_of(name):
    if name in IMPL_COLOURS:
        return IMPL_COLOURS[name]
    return OTHER_COLOURS[zlib.crc32(name.encode()) % len(OTHER_COLOURS)]


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


def device_of(row, meta):
    """The device a row ran on: the GPU's name, else the CPU's model name."""
    if row.get("device"):
        return row["device"]
    if row.get("backend") == "cpu":
        return dig(meta, "host", "cpu") or "cpu"
    return dig(meta, "gpu", "name") or row.get("backend", "?")


def on_cpu(row):
    """Whether a row's rate is read in GFLOP/s (the CPU's scale) rather than TFLOP/s: flashbench's `cpu`
    backend and the CPU peer (scripts/peers/torch_cpu.py, backend "torch-cpu-...")."""
    return row.get("backend") == "cpu" or str(row.get("backend", "")).startswith("torch-cpu")


def problem_key(problem):
    """Every axis of a problem, defaults filled in, so rows of older files match newer ones."""
    full = dict(PROBLEM_DEFAULTS, **problem)
    full.setdefault("kv_heads", full.get("heads"))
    full.setdefault("seq_k", full.get("seq"))
    full.pop("seq_q", None)
    full["dropout"] = float(full["dropout"] or 0)  # 0 and 0.0 are one problem
    return json.dumps(full, sort_keys=True)


def baseline_key(row, meta):
    """Rows with equal keys ran the same problem on the same device (and thread count)."""
    return (device_of(row, meta), row.get("threads", 0) if on_cpu(row) else 0, problem_key(row["problem"]))


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


def spread(row, phase):
    """(fastest, slowest) sample of phase in ms, or (None, None) without samples."""
    samples = samples_ms(row, phase)
    return (min(samples), max(samples)) if samples else (None, None)


def point_of(row, meta, standard):
    """What the figures read from one row; `standard` is flashbench's `standard` row on the same
    problem and device, or None."""
    measured = dig(row, "memory", "measured") or {}
    by_tag = measured.get("by_tag") or {}
    point = {
        "seq": int(row["problem"]["seq"]),
        "batch": row["problem"].get("batch"),
        "peak_bytes": number(measured.get("peak_bytes")),
        "model_peak_bytes": number(dig(row, "memory", "model", "peak_bytes")),
        # A tag the row does not state (null or absent) is unknown, not zero.
        "by_tag": {tag: by_tag.get(tag) if isinstance(by_tag.get(tag), (int, float)) else None for tag in TAGS},
        "peak_gflops": number(dig(row, "throughput", "peak_gflops")),
        "on_cpu": on_cpu(row),
        "context": context_of(row, meta),
    }
    for phase in ("fwd", "bwd"):
        point[f"{phase}_ms"] = median_ms(row, phase)
        point[f"{phase}_min_ms"], point[f"{phase}_max_ms"] = spread(row, phase)
        point[f"{phase}_flop"] = flop(row, phase)
        point[f"standard_{phase}_ms"] = median_ms(standard, phase) if standard else None
        throttled = dig(row, "timing", phase, "throttled_samples")
        point[f"{phase}_throttled"] = throttled if isinstance(throttled, int) else None
    # Named in the file's summary as far off its series' scaling (summary.disturbed), or its
    # standard is: a speed-up built on either is suspect.
    point["disturbed"] = bool(row.get(DISTURBED_KEY))
    point["standard_disturbed"] = bool(standard and standard.get(DISTURBED_KEY))
    return point


def context_of(row, meta):
    """The axes a figure's title names, for one row."""
    problem = row["problem"]
    return {"device": device_of(row, meta), "threads": row.get("threads") if on_cpu(row) else None,
            "dtype": problem.get("dtype", "fp32"), "head_dim": problem.get("head_dim"),
            "heads": problem.get("heads"), "kv_heads": problem.get("kv_heads", problem.get("heads")),
            "batch": problem.get("batch"), "seq": problem.get("seq"),
            "seq_k": problem.get("seq_k", problem.get("seq")), "causal": bool(problem.get("causal")),
            "layers": problem.get("layers", 1), "dropout": problem.get("dropout") or 0.0}


def values(contexts, key):
    """The distinct values of one axis, in order, as text: "64, 128"."""
    distinct = sorted({c[key] for c in contexts if c[key] is not None}, key=lambda v: (str(type(v)), v))
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in distinct)


def context_title(contexts):
    """ "NVIDIA H200 · bf16 · d = 128 · H = 16 · B·N = 16384 · no mask", from the rows drawn."""
    parts = [values(contexts, "device")]
    threads = values(contexts, "threads")
    if threads:
        parts.append(f"{threads} threads")
    parts += [values(contexts, "dtype"), f"d = {values(contexts, 'head_dim')}", f"H = {values(contexts, 'heads')}"]
    if any(c["kv_heads"] != c["heads"] for c in contexts):
        parts.append(f"G = {values(contexts, 'kv_heads')}")
    parts.append(batch_text(contexts))
    masks = {c["causal"] for c in contexts}
    parts.append("causal" if masks == {True} else "no mask" if masks == {False} else "mask: none, causal")
    if any(c["seq_k"] != c["seq"] for c in contexts):
        parts.append(f"N_k = {values(contexts, 'seq_k')}")
    if any(c["layers"] != 1 for c in contexts):
        parts.append(f"L = {values(contexts, 'layers')}")
    if any(c["dropout"] for c in contexts):
        parts.append(f"dropout = {values(contexts, 'dropout')}")
    return "\n".join(textwrap.wrap(" · ".join(parts), 110))


def batch_text(contexts):
    """ "B = 1", or where the batch scales with N at a fixed token count T: "B·N = T", or
    "B = max(1, T/N)" when the longest N ran at B = 1 (the peers' and GPU sweeps' --tokens)."""
    batches = {c["batch"] for c in contexts}
    sized = [c for c in contexts if isinstance(c["batch"], int) and isinstance(c["seq"], int)]
    if len(batches) > 1 and len(sized) == len(contexts):
        tokens = {c["batch"] * c["seq"] for c in sized}
        if len(tokens) == 1:
            return f"B·N = {tokens.pop()}"
        scaled = {c["batch"] * c["seq"] for c in sized if c["batch"] > 1}
        if len(scaled) == 1:
            total = scaled.pop()
            if all(c["batch"] == max(1, total // c["seq"]) for c in sized):
                return f"B = max(1, {total}/N)"
    return f"B = {values(contexts, 'batch')}"


def parse_where(conditions):
    """["causal=false", "head_dim=128"] -> {"causal": False, "head_dim": 128} (values read as JSON,
    else as text)."""
    wanted = {}
    for condition in conditions or []:
        key, separator, text = condition.partition("=")
        if not separator or not key:
            raise UsageError(f"--where '{condition}': expected KEY=VALUE, e.g. causal=false")
        try:
            wanted[key] = json.loads(text)
        except json.JSONDecodeError:
            wanted[key] = text
    return wanted


def keep(row, wanted):
    problem = dict(PROBLEM_DEFAULTS, **row["problem"])
    return all(problem.get(key) == value for key, value in wanted.items())


def collect_series(paths, where=None):
    """(sources, series): series keyed by (source, name, shape label), points sorted by N.

    Rows that differ only in N form one series. A peer that scales the batch with N (constant
    B·N tokens) would give one point per batch; series that differ only in the batch and share no
    N are therefore joined, and the label says how the batch went.
    """
    wanted = parse_where(where)
    loaded = []
    for path in paths:
        results = read_results(path)
        for disturbed in results.summary.get("disturbed") or []:
            index = disturbed.get("row") if isinstance(disturbed, dict) else None
            if isinstance(index, int) and 0 <= index < len(results.rows):
                results.rows[index][DISTURBED_KEY] = True
        ok = [r for r in results.rows if r.get("status") == "ok" and number(dig(r, "problem", "seq")) is not None]
        for key in wanted:
            if ok and not any(key in r["problem"] or key in PROBLEM_DEFAULTS for r in ok):
                raise UsageError(f"--where {key}: no row of '{path}' has problem.{key}")
        loaded.append((path, results.meta, [r for r in ok if keep(r, wanted)]))
    names = source_names(loaded)
    standards = {baseline_key(row, meta): row for _, meta, rows in loaded for row in rows
                 if not is_peer(row) and name_of(row) == "standard"}
    groups = {}  # (source, name, shape without batch) -> {batch: [points]}
    sources = []
    for path, meta, rows in loaded:
        for row in rows:
            source = names[(path, row.get("backend", "?"))]
            if source not in sources:
                sources.append(source)
            key = (source, name_of(row), shape_of(row["problem"], with_batch=False))
            point = point_of(row, meta, standards.get(baseline_key(row, meta)))
            groups.setdefault(key, {}).setdefault(row["problem"].get("batch"), []).append(point)
    series = {}
    for (source, name, shape), by_batch in groups.items():
        seqs = [p["seq"] for points in by_batch.values() for p in points]
        if len(by_batch) > 1 and len(seqs) == len(set(seqs)):
            points = [p for points in by_batch.values() for p in points]
            tokens = {p["seq"] * p["batch"] for p in points if isinstance(p["batch"], int)}
            batch = f"B*N={tokens.pop()}" if len(tokens) == 1 else "B varies"
            series[(source, name, f"{batch} {shape}")] = points
        else:
            for b, points in by_batch.items():
                series[(source, name, f"B={b} {shape}")] = points
    for points in series.values():
        points.sort(key=lambda p: p["seq"])
    return sources, series


def series_label(key, series):
    """ "v2 (cuda)", a peer by its name alone, with the shape when that source has more than one."""
    source, name, shape = key
    shapes = {k[2] for k in series if k[0] == source}
    where = ([] if name == source else [source]) + ([shape] if len(shapes) > 1 else [])
    return f"{name} ({', '.join(where)})" if where else name


def style_for(key, sources):
    line, marker = SOURCE_STYLES[sources.index(key[0]) % len(SOURCE_STYLES)]
    return {"color": colour_of(key[1]), "linestyle": line, "marker": marker}


def phase_value(point, phase, field):
    """A point's time in ms (field "ms", "min_ms", "max_ms") or FLOP ("flop") of phase, with
    "total" the sum of forward and backward; None where either is missing."""
    if phase != "total":
        return point[f"{phase}_{field}"]
    parts = [point[f"fwd_{field}"], point[f"bwd_{field}"]]
    return None if None in parts else sum(parts)


def rate(point, phase, time_field, per):
    """FLOP / time in units of `per` FLOP/s, or None."""
    count, time = phase_value(point, phase, "flop"), phase_value(point, phase, time_field)
    return count / (time * 1e-3) / per if count and time else None


def import_matplotlib():
    """(pyplot, numpy), or a UsageError that says which Debian package to install."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
        import numpy as np  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise UsageError(f"drawing needs matplotlib and numpy ({error}): apt-get install python3-matplotlib")
    return plt, np


def describe_figure(figure, file_names):
    """What a drawn figure shows, read back from its artists: the file names, the title, the legend
    entries, and per panel its labels, lines, bands (min and max at each x) and stacked bars."""
    from matplotlib.collections import PolyCollection  # pylint: disable=import-outside-toplevel
    from matplotlib.colors import to_hex  # pylint: disable=import-outside-toplevel
    from matplotlib.container import BarContainer  # pylint: disable=import-outside-toplevel

    panels = []
    for axis in figure.axes:
        if axis.get_label() != "panel":
            continue  # a secondary axis: its label joins its panel's as ylabel_right
        panel = {"title": axis.get_title(), "xlabel": axis.get_xlabel(), "ylabel": axis.get_ylabel(),
                 "ylabel_right": " ".join(child.get_ylabel() for child in axis.child_axes),
                 "ylim": [float(limit) for limit in axis.get_ylim()],
                 "lines": [], "bands": [], "bars": []}
        for line in axis.get_lines():
            if not line.get_label().startswith("_"):
                panel["lines"].append({"label": line.get_label(), "colour": to_hex(line.get_color()),
                                       "x": [float(x) for x in line.get_xdata()],
                                       "y": [float(y) for y in line.get_ydata()]})
        for collection in axis.collections:
            if isinstance(collection, PolyCollection) and collection.get_gid():
                vertices = collection.get_paths()[0].vertices
                xs = sorted({float(x) for x, _ in vertices})
                panel["bands"].append({"series": collection.get_gid(), "x": xs,
                                       "low": [float(min(y for x, y in vertices if x == at)) for at in xs],
                                       "high": [float(max(y for x, y in vertices if x == at)) for at in xs]})
        ticks = [tick.get_text() for tick in axis.get_xticklabels()]
        bars = {}
        for container in axis.containers:
            if isinstance(container, BarContainer):
                for index, patch in enumerate(container.patches):
                    bar = bars.setdefault(index, {"label": ticks[index] if index < len(ticks) else str(index),
                                                  "colour": to_hex(patch.get_edgecolor()), "segments": {},
                                                  "top": 0.0})
                    bar["segments"][container.get_label()] = float(patch.get_height())
                    bar["top"] = max(bar["top"], float(patch.get_y() + patch.get_height()))
        panel["bars"] = [bars[index] for index in sorted(bars)]
        panels.append(panel)
    legend = [text.get_text() for legend in figure.legends for text in legend.get_texts()]
    # Debian 12's matplotlib (3.6) has no Figure.get_suptitle (3.8): the attribute it would return.
    title = figure._suptitle.get_text() if figure._suptitle else ""  # pylint: disable=protected-access
    return {"files": file_names, "title": title, "legend": legend, "panels": panels}


class Canvas:
    """What every figure shares: the series, pyplot, the output folder, and the list of what was
    written and drawn. Its methods make panels, draw one series, and save a figure with its title."""

    def __init__(self, plt, sources, series, out_dir, svg):
        self.plt, self.sources, self.series, self.out_dir, self.svg = plt, sources, series, out_dir, svg
        self.written, self.described = [], []

    def label(self, key):
        return series_label(key, self.series)

    def panels(self, count, width=6.0, height=5.0):
        figure, axes = self.plt.subplots(1, count, figsize=(width * count, height), squeeze=False)
        for axis in axes[0]:
            axis.set_label("panel")
        return figure, list(axes[0])

    def save(self, figure, name, subject, keys, bottom=0.0, right=1.0):
        """Titles the figure with its subject and the context of the series `keys` drawn in it, and
        writes it (PNG, and SVG with --svg)."""
        contexts = [p["context"] for key in keys for p in self.series[key]]
        figure.suptitle(f"{subject}\n{context_title(contexts)}", fontsize=10)
        figure.tight_layout(rect=(0, bottom, right, 1))
        files = []
        for extension in (["png", "svg"] if self.svg else ["png"]):
            path = os.path.join(self.out_dir, f"{name}.{extension}")
            figure.savefig(path, dpi=100)
            files.append(os.path.basename(path))
            self.written.append(path)
        self.described.append(dict(describe_figure(figure, files), name=name))
        self.plt.close(figure)

    def save_with_legend(self, figure, axes, name, subject, keys, extra_handles=()):
        """The legend of every panel's lines below the plots, in up to three columns; the figure grows
        to fit."""
        entries = {}
        for axis in axes:
            for handle, label in zip(*axis.get_legend_handles_labels()):
                entries.setdefault(label, handle)
        for handle in extra_handles:
            entries.setdefault(handle.get_label(), handle)
        columns = min(3, max(1, len(entries)))
        legend_height = 0.22 * math.ceil(len(entries) / columns) + 0.2  # [inches]
        figure.set_figheight(figure.get_figheight() + legend_height)
        if entries:
            figure.legend(list(entries.values()), list(entries.keys()), loc="lower center", ncol=columns,
                          fontsize=8, frameon=False)
        self.save(figure, name, subject, keys, bottom=legend_height / figure.get_figheight())

    def curve(self, axis, key, xs, ys, lows=None, highs=None, **extra):
        """One series' line, and its band where every point has both ends of the spread."""
        style = dict(style_for(key, self.sources), **extra)
        axis.plot(xs, ys, label=self.label(key), **style)
        if lows is not None and all(v is not None for v in lows + highs) and xs:
            band = axis.fill_between(xs, lows, highs, color=style["color"], alpha=0.18, linewidth=0)
            band.set_gid(self.label(key))  # names the band for describe_figure; gid stays out of the legend


def n_axis(axis):
    axis.set_xscale("log", base=2)
    axis.set_xlabel("sequence length N")
    axis.grid(True, which="both", alpha=0.3)


def band_handle():
    from matplotlib.patches import Patch  # pylint: disable=import-outside-toplevel

    return Patch(facecolor="#999999", alpha=0.35, label=BAND_NOTE)


THROTTLED_NOTE = "x: some samples ran with the GPU throttled"
DISTURBED_NOTE = "ring: disturbed? far off its series' scaling (run it again)"
DISTURBED_KEY = "_disturbed"  # set on a row dict the file's summary names


def time_figure(canvas):
    """Forward and backward median time against N, log-log, with the samples' band; an x on the
    points whose samples the GPU's clock held down (timing.*.throttled_samples)."""
    figure, axes = canvas.panels(2)
    drawn = set()
    for axis, (phase, phase_name) in zip(axes, PHASES[:2]):
        for key, points in canvas.series.items():
            shown = [p for p in points if p[f"{phase}_ms"] is not None]
            if shown:
                canvas.curve(axis, key, [p["seq"] for p in shown], [p[f"{phase}_ms"] for p in shown],
                             [p[f"{phase}_min_ms"] for p in shown], [p[f"{phase}_max_ms"] for p in shown])
                drawn.add(key)
                throttled = [p for p in shown if (p[f"{phase}_throttled"] or 0) > 0]
                if throttled:  # one legend entry for all of them: the legend keeps one handle a label
                    axis.plot([p["seq"] for p in throttled], [p[f"{phase}_ms"] for p in throttled],
                              linestyle="none", marker="x", color="#d62728", markersize=9, label=THROTTLED_NOTE)
                disturbed = [p for p in shown if p["disturbed"]]
                if disturbed:
                    mark_disturbed(axis, [p["seq"] for p in disturbed], [p[f"{phase}_ms"] for p in disturbed])
        n_axis(axis)
        axis.set_yscale("log")
        axis.set_title(f"{phase_name} time")
        axis.set_ylabel("median time [ms]")
    canvas.save_with_legend(figure, axes, "time_vs_seq", f"time against N (median; {BAND_NOTE})", drawn,
                            [band_handle()])


def byte_unit(largest):
    """The binary unit a memory axis reads in: the largest whose value of `largest` bytes is at least
    1 (MiB-scale peaks on a MiB axis, not 0.002 GiB), as (name, bytes)."""
    for name, size in (("TiB", 2 ** 40), ("GiB", GIB), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if largest >= size:
            return name, size
    return "B", 1


def memory_figure(canvas):
    """Peak memory against N: measured as markers only, the model as lines."""
    figure, axes = canvas.panels(1, 8, 6)
    axis = axes[0]
    names = sorted({key[1] for key in canvas.series})
    unit, size = byte_unit(max([p[k] for points in canvas.series.values() for p in points
                                for k in ("peak_bytes", "model_peak_bytes") if p[k] is not None] or [0]))
    drawn = set()
    for key, points in canvas.series.items():
        shown = [p for p in points if p["peak_bytes"] is not None]
        if shown:
            style = style_for(key, canvas.sources)
            # Hollow rings of decreasing size, so implementations with equal peaks stay visible.
            axis.plot([p["seq"] for p in shown], [p["peak_bytes"] / size for p in shown], linestyle="none",
                      marker=style["marker"], color=style["color"], markerfacecolor="none", markeredgewidth=1.5,
                      markersize=11 - 2 * (names.index(key[1]) % 4), label=canvas.label(key))
            drawn.add(key)
    for key, points in canvas.series.items():
        shown = [p for p in points if p["model_peak_bytes"] is not None]
        if shown:
            style = style_for(key, canvas.sources)
            axis.plot([p["seq"] for p in shown], [p["model_peak_bytes"] / size for p in shown], color=style["color"],
                      linestyle=style["linestyle"], alpha=0.6, label=f"model: {canvas.label(key)}")
            drawn.add(key)
    n_axis(axis)
    axis.set_yscale("log")
    axis.set_ylabel(f"peak memory [{unit}]")
    axis.set_title("measured (markers), model (lines)")
    canvas.save_with_legend(figure, axes, "memory_vs_seq", "peak memory against N", drawn)


def rate_figure(canvas):
    """Rate against N: forward, backward and both, linear, as FlashAttention's benchmark plots; on the
    CPU in GFLOP/s with % of the sgemm ceiling when every row carries the same one."""
    every_point = [p for points in canvas.series.values() for p in points]
    everything_on_cpu = all(p["on_cpu"] for p in every_point)
    unit, per = ("GFLOP/s", 1e9) if everything_on_cpu else ("TFLOP/s", 1e12)
    peaks = {p["peak_gflops"] for p in every_point}
    figure, axes = canvas.panels(3, 5, 5)
    drawn = set()
    for axis, (phase, phase_name) in zip(axes, PHASES):
        for key, points in canvas.series.items():
            shown = [p for p in points if rate(p, phase, "ms", per) is not None]
            if shown:
                # The slowest sample gives the lowest rate.
                canvas.curve(axis, key, [p["seq"] for p in shown], [rate(p, phase, "ms", per) for p in shown],
                             [rate(p, phase, "max_ms", per) for p in shown],
                             [rate(p, phase, "min_ms", per) for p in shown])
                drawn.add(key)
        n_axis(axis)
        axis.set_ylim(bottom=0)
        axis.set_title(phase_name)
        axis.set_ylabel(f"{unit} (the rows' FLOP counts)")
        if everything_on_cpu and len(peaks) == 1 and None not in peaks:
            peak = next(iter(peaks))
            right = axis.secondary_yaxis("right", functions=(lambda g, peak=peak: 100 * g / peak,
                                                             lambda pct, peak=peak: pct * peak / 100))
            right.set_ylabel(f"% of peak ({peak:.0f} GFLOP/s, the sgemm ceiling)")
    canvas.save_with_legend(figure, axes, "throughput_vs_seq",
                            f"{unit} against N (median; {BAND_NOTE}; FLOP as FlashAttention counts them)", drawn,
                            [band_handle()])


def mark_disturbed(axis, xs, ys):
    """A ring around points the summary calls disturbed (one legend entry for all of them)."""
    axis.plot(xs, ys, linestyle="none", marker="o", markersize=16, markerfacecolor="none", markeredgecolor="#ff7f0e",
              markeredgewidth=2, label=DISTURBED_NOTE)


def speedup_figure(canvas):
    """Speed-up against flashbench's `standard` on the same problem and device; no figure when no
    series has one."""
    figure, axes = canvas.panels(3, 5, 5)
    drawn = set()
    for axis, (phase, phase_name) in zip(axes, PHASES):
        for key, points in canvas.series.items():
            pairs = [(p["seq"], phase_value(p, phase, "ms"), standard_ms(p, phase),
                      p["disturbed"] or p["standard_disturbed"]) for p in points]
            pairs = [(n, s / t, suspect) for n, t, s, suspect in pairs if t and s]
            if pairs:
                canvas.curve(axis, key, [n for n, _, _ in pairs], [r for _, r, _ in pairs])
                drawn.add(key)
                suspect = [(n, r) for n, r, flagged in pairs if flagged]
                if suspect:
                    mark_disturbed(axis, *map(list, zip(*suspect)))
        axis.axhline(1.0, color="#555555", linewidth=0.8, label="_same as standard")
        n_axis(axis)
        axis.set_title(phase_name)
        axis.set_ylabel("speed-up: standard's median / this median")
    if drawn:
        canvas.save_with_legend(figure, axes, "speedup_vs_seq", "speed-up against flashbench's standard", drawn)
    else:
        canvas.plt.close(figure)


def ratio_figure(canvas):
    """bwd / fwd against N, with seed 002's rule of thumb (docs/articles.md)."""
    figure, axes = canvas.panels(1, 8, 6)
    axis = axes[0]
    drawn = set()
    for key, points in canvas.series.items():
        pairs = [(p["seq"], p["bwd_ms"] / p["fwd_ms"]) for p in points if p["bwd_ms"] and p["fwd_ms"]]
        if pairs:
            canvas.curve(axis, key, *map(list, zip(*pairs)))
            drawn.add(key)
    axis.axhspan(1.5, 2.0, color="#2ca02c", alpha=0.12, label="rule of thumb: 1.5-2x normal")
    axis.axhline(3.0, color="#d62728", linestyle="--", linewidth=1, label="rule of thumb: > 3x, too much recompute")
    n_axis(axis)
    axis.set_ylabel("backward time / forward time (medians)")
    axis.set_title("bwd / fwd")
    canvas.save_with_legend(figure, axes, "bwd_over_fwd", "backward over forward against N", drawn)


def tag_figure(canvas, np):
    """The measured peak split by tag, at up to four N (smallest, largest and evenly between), one
    bar per series standing at its measured peak: what its tags leave unexplained is `unattributed`."""
    from matplotlib.patches import Patch  # pylint: disable=import-outside-toplevel

    series = canvas.series
    bar_series = [key for key, points in series.items() if any(p["peak_bytes"] for p in points)]
    all_seq = sorted({p["seq"] for key in bar_series for p in series[key] if p["peak_bytes"]})
    if not all_seq:
        return
    picks = sorted({round(i * (len(all_seq) - 1) / 3) for i in range(4)}) if len(all_seq) > 4 else range(len(all_seq))
    chosen = [all_seq[i] for i in picks]
    figure, axes = canvas.panels(len(chosen), 3.4, 5.5)
    figure.set_figwidth(figure.get_figwidth() + 1.6)
    unit, size = byte_unit(max(p["peak_bytes"] for key in bar_series for p in series[key] if p["peak_bytes"]))
    drawn = set()
    segments_shown = set()  # the segments with bytes in some bar: the legend names only those
    for axis, n in zip(axes, chosen):
        present = [key for key in bar_series if any(p["seq"] == n and p["peak_bytes"] for p in series[key])]
        drawn.update(present)
        points = [next(p for p in series[key] if p["seq"] == n and p["peak_bytes"]) for key in present]
        xs = np.arange(len(present))
        bottom = np.zeros(len(present))
        for segment in TAGS + [UNATTRIBUTED]:
            heights = np.array([tag_share(p, segment) / size for p in points], dtype=float)
            if heights.any():
                segments_shown.add(segment)
            axis.bar(xs, heights, 0.7, bottom=bottom, color=TAG_COLOURS[segment], label=segment,
                     hatch="//" if segment == UNATTRIBUTED else None,
                     edgecolor=[colour_of(key[1]) for key in present], linewidth=1.5)
            bottom += heights
        # Zero-height segments on top of a bar are sticky edges that would cancel autoscale's headroom.
        axis.set_ylim(0, 1.05 * max(bottom))
        axis.set_xticks(xs)
        axis.set_xticklabels([key[1] if len(canvas.sources) == 1 else canvas.label(key) for key in present],
                             rotation=45, ha="right", fontsize=8)
        axis.set_title(f"N = {n}")
        axis.set_ylabel(f"live at the peak [{unit}]")
        axis.grid(True, axis="y", alpha=0.3)
    handles = [Patch(facecolor=TAG_COLOURS[s], hatch="//" if s == UNATTRIBUTED else None, label=s)
               for s in TAGS + [UNATTRIBUTED] if s in segments_shown]
    figure.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    canvas.save(figure, "memory_by_tag", "measured peak memory by tag" +
                (" (unattributed: peak less the tags the row states)" if UNATTRIBUTED in segments_shown else ""),
                drawn, right=1 - 1.5 / figure.get_figwidth())


def draw(paths, out_dir, svg, where=None):
    """Draws every figure into out_dir; returns (written file paths, a description per figure)."""
    plt, np = import_matplotlib()
    sources, series = collect_series(paths, where)
    if not series:
        raise RuntimeError("no ok rows to plot" + (f" with --where {' '.join(where)}" if where else ""))
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--out '{out_dir}': {error.strerror}")
    canvas = Canvas(plt, sources, series, out_dir, svg)
    for figure in (time_figure, memory_figure, rate_figure, speedup_figure, ratio_figure):
        figure(canvas)
    tag_figure(canvas, np)
    return canvas.written, canvas.described


def standard_ms(point, phase):
    """flashbench's `standard` median on the point's problem and device, for phase (or "total")."""
    if phase != "total":
        return point[f"standard_{phase}_ms"]
    parts = [point["standard_fwd_ms"], point["standard_bwd_ms"]]
    return None if None in parts else sum(parts)


def tag_share(point, segment):
    """Bytes of one bar segment: a tag's bytes at the peak, or for "unattributed" the peak less every
    tag the row states (0 for flashbench's rows, whose tags add up to the peak)."""
    if segment != UNATTRIBUTED:
        return point["by_tag"][segment] or 0
    return max(0.0, point["peak_bytes"] - sum(v for v in point["by_tag"].values() if v is not None))


def write_json_atomically(path, document):
    temporary = f"{path}.tmp{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
        os.replace(temporary, path)
    except OSError as error:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise UsageError(f"cannot write '{path}': {error.strerror}")


def main(argv):
    parser = argparse.ArgumentParser(description="Figures from flashbench JSON results.")
    parser.add_argument("results", nargs="+", help="results files (.json or .jsonl)")
    parser.add_argument("--out", help="output folder for the figures")
    parser.add_argument("--svg", action="store_true", help="also write SVG")
    parser.add_argument("--where", action="append", metavar="KEY=VALUE",
                        help="keep rows whose problem has this value, e.g. causal=false (repeatable)")
    parser.add_argument("--describe", metavar="FILE", help="also write what each figure drew, as JSON")
    parser.add_argument("--dump-series", action="store_true", help="print the series as JSON, draw nothing")
    args = parser.parse_args(argv)
    try:
        if args.dump_series:
            sources, series = collect_series(args.results, args.where)
            dumped = [{"source": k[0], "name": k[1], "shape": k[2], "points": v} for k, v in series.items()]
            print(json.dumps({"sources": sources, "series": dumped}, indent=1))
            return 0
        if not args.out:
            raise UsageError("--out DIR is required")
        written, described = draw(args.results, args.out, args.svg, args.where)
        if args.describe:
            write_json_atomically(args.describe, {"figures": described})
        for path in written:
            print(path)
        return 0
    except (UsageError, ResultsError) as error:
        print(f"plot.py: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:
        print(f"plot.py: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # a figure that could not be written (a full disk, a read-only folder)
        print(f"plot.py: cannot write '{error.filename}': {error.strerror}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
