"""The GPU milestone table of a sweep: flashbench's `v2` beside the PyTorch SDPA peers, per head dim, N
and mask, as Markdown.

Reads one or more results files (a `flashbench merge` output with the peers' rows, or rows files and
peer files side by side) through results.py, and prints, for every (d, N, causal) where flashbench's
`v2` has an `ok` row:

  v2 fwd/bwd medians [ms] and backward TFLOP/s (the row's own throughput), torch `flash` (FA2) and
  `cudnn` backward medians, the ratios FA2/v2 and cuDNN/v2 of the backward times (above 1: v2 is
  faster), flashbench's own `cudnn` implementation and `standard` backward where they ran, and the
  peak memory beyond the inputs of v2 against torch `cudnn` (their `memory.peak_bytes` less
  `input` bytes; the peers count q, k and v where flashbench's stack has one X, so both are shown
  without inputs).

A missing cell is "–": a peer that did not run the shape, an `oom` or `skipped` row (its status is
written instead). Every number comes from the files; nothing is restated here. Rows measured with
`--cold` are left out of that table.

With --warm-cold it prints instead, for every flashbench implementation and shape that has both a
warm row and a `--cold` row (caches flushed before every pass), the forward and backward medians of
each and the backward's cold/warm ratio.

Usage: python3 scripts/gpu_table.py RESULTS... [--impl v2] [--warm-cold]
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
    return f"{value:.3f}" if value is not None else "–"


def ratio(numerator_row, denominator_row):
    if numerator_row is None or denominator_row is None:
        return "–"
    a, b = median_ms(numerator_row, "bwd"), median_ms(denominator_row, "bwd")
    return f"{a / b:.2f}" if a and b else "–"


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
    parser.add_argument("--warm-cold", action="store_true",
                        help="warm beside --cold medians of flashbench's implementations instead")
    args = parser.parse_args(argv)
    try:
        if args.warm_cold:
            print(markdown_warm_cold(collect_warm_cold(args.results)))
        else:
            print(markdown(collect(args.results), args.impl))
    except ResultsError as error:
        print(f"gpu_table: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
