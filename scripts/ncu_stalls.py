"""Where a kernel's warps stall, instruction by instruction: reads Nsight Compute's source page as CSV
(`ncu --section SourceCounters --page source --print-source sass --csv ...`, what
`NCU_SASS=1 scripts/gpu-ncu.sh` writes to OUTPUT_DIR/sass.csv) and writes markdown: each stall
reason's share of all the warp-state samples, then for the largest reasons the instructions that
hold most of their samples (address, SASS, samples, share of all samples).

That is how docs/cuda-design.md attributes a stall: ncu's "barrier" stall in a Hopper kernel may be
`WARPGROUP.DEPBAR` (a warpgroup waiting for its own matrix products) rather than a `BAR.SYNC`.

Usage: python3 scripts/ncu_stalls.py SASS.csv[.gz] [--reasons 4] [--top 5]
Exit status 2 when the file cannot be read or holds no instruction rows.
"""
import argparse
import csv
import gzip
import sys

TOTAL = "Warp Stall Sampling (All Samples)"
REASON_PREFIX = "stall_"  # ncu's per-reason columns: stall_wait, stall_barrier, ...; "(Not Issued)" ones skipped


class StallError(Exception):
    pass


def read_rows(path):
    """The instruction rows of ncu's source-page CSV: the text before the "Address" header (the
    profiled program's own output, ncu's notes) is skipped."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", newline="") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise StallError(f"cannot read {path}: {error}") from None
    header = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if header is None:
        raise StallError(f"{path}: no \"Address\" header: not ncu's source page as CSV (--page source --csv)")
    reader = csv.reader(lines[header:])
    columns = next(reader)
    if "Source" not in columns or TOTAL not in columns:
        raise StallError(f"{path}: no \"Source\" or \"{TOTAL}\" column: read with --section SourceCounters")
    rows = [dict(zip(columns, values)) for values in reader if len(values) == len(columns)]
    if not rows:
        raise StallError(f"{path}: no instruction rows")
    return columns, rows


def samples(row, column):
    try:
        return int(row.get(column, "0").replace(",", ""))
    except ValueError:
        return 0  # "-" where ncu has no value


def report(columns, rows, reasons, top):
    total = sum(samples(row, TOTAL) for row in rows)
    if total == 0:
        raise StallError("no warp-state samples in the file")
    reason_columns = [c for c in columns if c.startswith(REASON_PREFIX) and "(Not Issued)" not in c]
    by_reason = sorted(((sum(samples(row, c) for row in rows), c) for c in reason_columns), reverse=True)
    out = [f"{len(rows)} instructions, {total:,} warp-state samples", "",
           "| reason | samples | share |", "| --- | ---: | ---: |"]
    out += [f"| {c[len(REASON_PREFIX):]} | {n:,} | {100 * n / total:.1f} % |" for n, c in by_reason if n > 0]
    for n, column in by_reason[:reasons]:
        if n == 0:
            break
        out += ["", f"**{column[len(REASON_PREFIX):]}**: the {top} instructions with most of its samples", "",
                "| address | instruction | samples | share of all |", "| --- | --- | ---: | ---: |"]
        hottest = sorted(rows, key=lambda row: samples(row, column), reverse=True)[:top]
        for row in hottest:
            count = samples(row, column)
            if count == 0:
                break
            source = " ".join(row["Source"].split()).replace("|", "\\|")
            out.append(f"| `{row.get('Address', '?')}` | `{source}` | {count:,} | {100 * count / total:.1f} % |")
    return "\n".join(out) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="ncu's source page as CSV (.gz accepted)")
    parser.add_argument("--reasons", type=int, default=4, help="how many of the largest reasons to break down")
    parser.add_argument("--top", type=int, default=5, help="instructions listed for each reason")
    args = parser.parse_args(argv)
    if args.reasons < 0 or args.top < 1:
        parser.error("--reasons must be at least 0 and --top at least 1")
    try:
        columns, rows = read_rows(args.csv)
        sys.stdout.write(report(columns, rows, args.reasons, args.top))
    except StallError as error:
        print(f"ncu_stalls.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
