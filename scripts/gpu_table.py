"""The GPU milestone table of a sweep: flashbench's `v2` beside the PyTorch SDPA peers, per head dim, N
and mask, as Markdown.

Reads one or more results files (a `flashbench merge` output with the peers' rows, or rows files and
peer files side by side) through results.py, and prints, for every (d, N, causal) where flashbench's
`v2` has an `ok` row:

  v2 fwd/bwd medians [ms] and backward TFLOP/s (the row's own throughput), torch `flash` (FA2) and
  `cudnn` backward medians, the ratios FA2/v2 and cuDNN/v2 of the backward times (above 1: v2 is
  faster), flashbench's own `cudnn` implementation and `standard` backward where they ran, and the
  peak memory beyond the inputs of v2 against torch `cudnn` (their `memory.peak_bytes` less
  `input` bytes: what each holds beyond the same q, k, v and dO).

A median marked † is of a phase some of whose samples ran with the GPU throttled (the timing
protocol's `throttled_samples`; they are left out of the median where enough others remain); the
table's last line says so when one is.

A missing cell is "–": a peer that did not run the shape, an `oom` or `skipped` row (its status is
written instead). Every number comes from the files; nothing is restated here. Rows measured with
`--cold` are left out of that table.

With --warm-cold it prints instead, for every flashbench implementation and shape that has both a
warm row and a `--cold` row (caches flushed before every pass), the forward and backward medians of
each and the backward's cold/warm ratio.

With --summary it prints instead one line per head dim over the shapes of that table with N ≥
--min-n (both masks): the range (lowest–highest) of each ratio of a peer's median to ours, forward
and backward (torch `flash`, torch `cudnn`, flashbench's own `cudnn`), of our forward and backward
TFLOP/s, of our peak beyond the inputs over torch cuDNN's, and of `standard`'s backward over ours:
where a target ("at least FA2", "at least cuDNN", "peak no more than cuDNN's") is missed, by how much.

Usage: python3 scripts/gpu_table.py RESULTS... [--impl v2] [--warm-cold | --summary [--min-n N]]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import ResultsError, is_peer, median_ms, name_of, read_results  # noqa: E402

GIB = float(1 << 30)


def shape_of(row):
    problem = row.get("problem") or {}
    return (problem.get("head_dim"), problem.get("seq"), bool(problem.get("causal")))


def peak_beyond_inputs(row):
    """The measured peak less the bytes tagged `input` at that peak, in GiB, or None."""
    measured = (row.get("memory") or {}).get("measured") or {}
    peak = measured.get("peak_bytes")
    if not isinstance(peak, (int, float)):
        return None
    inputs = (measured.get("by_tag") or {}).get("input") or 0
    return (peak - inputs) / GIB


def collect(paths):
    """{(d, N, causal): {name: row}} of the warm rows, peers named by their backend ("torch-sdpa-flash")."""
    table = {}
    for path in paths:
        for row in read_results(path).rows:
            if not row.get("cold"):
                table.setdefault(shape_of(row), {})[name_of(row)] = row
    return table


def collect_warm_cold(paths):
    """{(implementation, d, N, causal): {False: warm row, True: cold row}} of flashbench's own rows."""
    table = {}
    for path in paths:
        for row in read_results(path).rows:
            if not is_peer(row):
                table.setdefault((name_of(row), *shape_of(row)), {})[bool(row.get("cold"))] = row
    return table


def cell_ms(row, phase):
    if row is None:
        return "–"
    if row.get("status", "ok") != "ok":
        return row.get("status")
    value = median_ms(row, phase)
    if value is None:
        return "–"
    return f"{value:.3f}" + ("†" if throttled(row, phase) else "")


def throttled(row, phase):
    """Whether some of the row's samples of phase ran with the GPU throttled."""
    count = ((row.get("timing") or {}).get(phase) or {}).get("throttled_samples")
    return isinstance(count, int) and count > 0


def ratio_value(numerator_row, denominator_row, phase="bwd"):
    """The numerator row's median over the denominator's, or None where either is missing or not an
    `ok` row (a `failed` row keeps its times, which are not a result)."""
    if numerator_row is None or denominator_row is None:
        return None
    if numerator_row.get("status", "ok") != "ok" or denominator_row.get("status", "ok") != "ok":
        return None
    a, b = median_ms(numerator_row, phase), median_ms(denominator_row, phase)
    return a / b if a and b else None


def ratio(numerator_row, denominator_row):
    value = ratio_value(numerator_row, denominator_row)
    return f"{value:.2f}" if value is not None else "–"


def gib(value):
    return f"{value:.2f}" if value is not None else "–"


def markdown(table, implementation):
    lines = [
        f"| d | N | causal | {implementation} fwd ms | FA2 fwd | cuDNN fwd | {implementation} bwd ms | "
        "bwd TFLOP/s | FA2 bwd | cuDNN bwd | FA2/v2 | cuDNN/v2 | cudnn (ours) bwd | standard bwd | "
        f"{implementation} peak GiB | torch cuDNN peak GiB |",
        "|" + "---|" * 16,
    ]
    for (d, n, causal), rows in sorted(table.items(), key=lambda item: (item[0][0] or 0, item[0][1] or 0, item[0][2])):
        ours = rows.get(implementation)
        if ours is None or ours.get("status", "ok") != "ok":
            continue
        flash, cudnn = rows.get("torch-sdpa-flash"), rows.get("torch-sdpa-cudnn")
        rate = (ours.get("throughput") or {}).get("bwd_tflops")
        lines.append(
            f"| {d} | {n} | {'yes' if causal else 'no'} | {cell_ms(ours, 'fwd')} | {cell_ms(flash, 'fwd')} | "
            f"{cell_ms(cudnn, 'fwd')} | {cell_ms(ours, 'bwd')} | {f'{rate:.0f}' if rate else '–'} | "
            f"{cell_ms(flash, 'bwd')} | {cell_ms(cudnn, 'bwd')} | {ratio(flash, ours)} | {ratio(cudnn, ours)} | "
            f"{cell_ms(rows.get('cudnn'), 'bwd')} | {cell_ms(rows.get('standard'), 'bwd')} | "
            f"{gib(peak_beyond_inputs(ours))} | {gib(peak_beyond_inputs(cudnn) if cudnn else None)} |")
    if any("†" in line for line in lines[2:]):
        lines += ["", "† some samples ran with the GPU throttled (left out of the median where enough others remain)"]
    lines += software_lines(table)
    return "\n".join(lines)


def cudnn_text(version):
    """torch.backends.cudnn.version()'s 91002 -> "cuDNN 9.10.2" (major·10000 + minor·100 + patch from 9 on)."""
    return f"cuDNN {version // 10000}.{version % 10000 // 100}.{version % 100}" if isinstance(version, int) else None


def software_lines(table):
    """The libraries and drivers the rows ran on, and a warning where flashbench's `cudnn` and torch's
    ran different cuDNN versions (their comparison is then also one of versions)."""
    ours, torch, drivers = set(), set(), set()
    for rows in table.values():
        for name, row in rows.items():
            provenance = row.get("provenance") or {}
            if name == "cudnn" and row.get("library"):
                ours.add(row["library"])
            if name == "torch-sdpa-cudnn" and cudnn_text(provenance.get("cudnn")):
                torch.add(cudnn_text(provenance.get("cudnn")))
            driver = row.get("driver") or provenance.get("driver_version")
            if driver:
                drivers.add(str(driver))
    parts = []
    if ours:
        parts.append(f"cudnn (ours): {', '.join(sorted(ours))}")
    if torch:
        parts.append(f"torch cuDNN: {', '.join(sorted(torch))}")
    if drivers:
        parts.append(f"driver {', '.join(sorted(drivers))}")
    if not parts:
        return []
    lines = ["", "Ran on: " + "; ".join(parts)]
    if ours and torch and ours != torch:
        lines.append(f"note: flashbench's cudnn and torch's ran different cuDNN versions ({', '.join(sorted(ours))} "
                     f"against {', '.join(sorted(torch))}): their columns differ by version too")
    return lines


# The --summary columns: heading, and the value of a shape from (ours, its rows), None where missing.
SUMMARY_COLUMNS = [
    ("bwd: FA2 ÷ ours", lambda ours, rows: ratio_value(rows.get("torch-sdpa-flash"), ours)),
    ("bwd: cuDNN ÷ ours", lambda ours, rows: ratio_value(rows.get("torch-sdpa-cudnn"), ours)),
    ("fwd: FA2 ÷ ours", lambda ours, rows: ratio_value(rows.get("torch-sdpa-flash"), ours, "fwd")),
    ("fwd: cuDNN ÷ ours", lambda ours, rows: ratio_value(rows.get("torch-sdpa-cudnn"), ours, "fwd")),
    ("bwd: cudnn (ours) ÷ ours", lambda ours, rows: ratio_value(rows.get("cudnn"), ours)),
    ("bwd TFLOP/s", lambda ours, rows: (ours.get("throughput") or {}).get("bwd_tflops")),
    ("fwd TFLOP/s", lambda ours, rows: (ours.get("throughput") or {}).get("fwd_tflops")),
    ("peak ÷ torch cuDNN's", lambda ours, rows: peak_ratio(ours, rows.get("torch-sdpa-cudnn"))),
    ("bwd: standard ÷ ours", lambda ours, rows: ratio_value(rows.get("standard"), ours)),
]


def peak_ratio(ours, peer):
    if peer is None or peer.get("status", "ok") != "ok":
        return None
    a, b = peak_beyond_inputs(ours), peak_beyond_inputs(peer)
    return a / b if a is not None and b else None


def value_range(values, digits):
    if not values:
        return "–"
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}–{high}"


def markdown_summary(table, implementation, min_n):
    """One line per head dim: over its shapes with N ≥ min_n where ours has an ok row, the range of
    every SUMMARY_COLUMNS value (rows that lack one, e.g. a peer's oom, are left out of that range)."""
    by_dim = {}
    for (d, n, causal), rows in table.items():
        ours = rows.get(implementation)
        if n is None or n < min_n or ours is None or ours.get("status", "ok") != "ok":
            continue
        entry = by_dim.setdefault(d, {"seqs": [], "values": [[] for _ in SUMMARY_COLUMNS]})
        entry["seqs"].append(n)
        for values, (_, value_of) in zip(entry["values"], SUMMARY_COLUMNS):
            value = value_of(ours, rows)
            if value is not None:
                values.append(value)
    lines = ["| d | shapes | N | " + " | ".join(heading for heading, _ in SUMMARY_COLUMNS) + " |",
             "|" + "---|" * (3 + len(SUMMARY_COLUMNS))]
    for d in sorted(by_dim, key=lambda d: d or 0):
        entry = by_dim[d]
        cells = [value_range(values, 0 if "TFLOP/s" in heading else 2)
                 for values, (heading, _) in zip(entry["values"], SUMMARY_COLUMNS)]
        lines.append(f"| {d} | {len(entry['seqs'])} | {value_range(entry['seqs'], 0)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_warm_cold(table):
    lines = ["| implementation | d | N | causal | fwd warm ms | fwd cold ms | bwd warm ms | bwd cold ms | bwd cold/warm |",
             "|" + "---|" * 9]
    for (name, d, n, causal), pair in sorted(table.items(), key=lambda item: (item[0][0], item[0][1] or 0,
                                                                                  item[0][2] or 0, item[0][3])):
        warm, cold = pair.get(False), pair.get(True)
        if warm is None or cold is None:
            continue
        a, b = median_ms(cold, "bwd"), median_ms(warm, "bwd")
        lines.append(f"| {name} | {d} | {n} | {'yes' if causal else 'no'} | {cell_ms(warm, 'fwd')} | "
                     f"{cell_ms(cold, 'fwd')} | {cell_ms(warm, 'bwd')} | {cell_ms(cold, 'bwd')} | "
                     f"{f'{a / b:.2f}' if a and b else '–'} |")
    return "\n".join(lines)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="results files (.json or .jsonl)")
    parser.add_argument("--impl", default="v2", help="flashbench implementation to tabulate (default v2)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--warm-cold", action="store_true",
                      help="warm beside --cold medians of flashbench's implementations instead")
    mode.add_argument("--summary", action="store_true",
                      help="one line per head dim: the ranges of the ratios to the peers, rates and peak")
    parser.add_argument("--min-n", type=int, default=1, help="--summary: only shapes with N at least this")
    args = parser.parse_args(argv)
    if args.min_n != 1 and not args.summary:
        parser.error("--min-n goes with --summary")
    try:
        if args.warm_cold:
            print(markdown_warm_cold(collect_warm_cold(args.results)))
        elif args.summary:
            print(markdown_summary(collect(args.results), args.impl, args.min_n))
        else:
            print(markdown(collect(args.results), args.impl))
    except ResultsError as error:
        print(f"gpu_table: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
