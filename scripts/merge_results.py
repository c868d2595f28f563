#!/usr/bin/env python3
"""Merges flashbench results files and peers' files into one results document, and prints a table.

    scripts/merge_results.py --out MERGED.json [FILE.json|.jsonl ...] [--peer PEER.json ...]

FILEs are flashbench's own results (e.g. one .jsonl per `flashbench run` of a sweep): every row is
kept, in order, and the meta of the first file that has one becomes the merged meta. Each --peer
file's rows (scripts/peers) come after them and its meta is appended to meta.peers. The merged
schema_version is the one the inputs carry: inputs whose schema_version differ are refused, as is
a file with rows but no schema_version; an empty .jsonl (a run that wrote nothing) is skipped.
The table (stdout) has one line per row: backend, implementation ("impl", or "variant" in files
from before "impl"), N, B, causal, median times, the row's own backward TFLOP/s, the measured and
modelled peak memory, the check's error and the status. Exit status 2 on an unreadable input or
differing schema versions (one line on stderr), nothing written then.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import ResultsError, impl_of, median_ms, read_results  # noqa: E402


def merge(files, peers):
    """The merged document {"schema_version", "meta", "rows"} of flashbench files and peers' files."""
    versions = {}  # path -> schema_version, for every input that holds anything
    meta, rows, peer_metas = None, [], []
    for path, is_peer in [(f, False) for f in files] + [(p, True) for p in peers]:
        results = read_results(path)
        if results.schema_version is None and not results.rows and not results.meta:
            continue  # an empty stream: the run wrote nothing
        if results.schema_version is None:
            raise ResultsError(f"'{path}' names no schema_version: cannot tell whether it merges")
        versions[path] = results.schema_version
        if is_peer:
            peer_metas.append(results.meta)
        elif meta is None and results.meta:
            meta = results.meta
        rows += results.rows
    found = sorted(set(map(json.dumps, versions.values())))
    if len(found) > 1:
        first = next(iter(versions.items()))
        other = next((p, v) for p, v in versions.items() if v != first[1])
        raise ResultsError(f"schema_version differs: '{first[0]}' has {json.dumps(first[1])}, "
                           f"'{other[0]}' has {json.dumps(other[1])}; not merging")
    if not versions:
        raise ResultsError("nothing to merge: no input holds a results document")
    meta = dict(meta or {})
    if peer_metas:
        meta["peers"] = list(meta.get("peers") or []) + peer_metas
    return {"schema_version": next(iter(versions.values())), "meta": meta, "rows": rows}


def table(rows):
    """One line per row, sorted by causal, N, backend and implementation."""
    def ms(r, phase):
        value = median_ms(r, phase)
        return f"{value:9.2f}" if value is not None else "        -"

    def gib(value):
        return f"{value / 2**30:8.2f}" if isinstance(value, (int, float)) and value else "       -"

    width = max([10] + [len(impl_of(r)) for r in rows])
    lines = [f"{'backend':20s} {'impl':{width}s} {'N':>6s} {'B':>3s} c {'fwd ms':>9s} {'bwd ms':>9s} {'bwdTF':>6s} "
             f"{'peakGiB':>8s} {'model':>8s} {'err':>8s} status"]
    def problem(r):
        return r.get("problem") if isinstance(r.get("problem"), dict) else {}

    for r in sorted(rows, key=lambda r: (bool(problem(r).get("causal")), problem(r).get("seq", 0),
                                         r.get("backend", ""), impl_of(r))):
        p = problem(r)
        tf = (r.get("throughput") or {}).get("bwd_tflops")
        measured = ((r.get("memory") or {}).get("measured") or {}).get("peak_bytes")
        model = ((r.get("memory") or {}).get("model") or {}).get("peak_bytes")
        err = (r.get("check") or {}).get("max_rel_err")
        lines.append(f"{r.get('backend', '?'):20s} {impl_of(r):{width}s} {p.get('seq', 0):6d} {p.get('batch', 0):3d} "
                     f"{int(bool(p.get('causal')))} {ms(r, 'fwd')} {ms(r, 'bwd')} "
                     f"{(f'{tf:6.1f}' if isinstance(tf, (int, float)) else '     -')} {gib(measured)} {gib(model)} "
                     f"{(f'{err:8.1e}' if isinstance(err, (int, float)) else '       -')} {r.get('status', '?')}")
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description="Merge flashbench results files and peers' files into one.")
    parser.add_argument("files", nargs="*", help="flashbench results files (.json or .jsonl)")
    parser.add_argument("--peer", action="append", default=[], help="a peer's results file (repeatable)")
    parser.add_argument("--out", required=True, help="the merged .json to write")
    args = parser.parse_args(argv)
    try:
        document = merge(args.files, args.peer)
    except ResultsError as error:
        print(f"merge_results.py: {error}", file=sys.stderr)
        return 2
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    os.replace(tmp, args.out)
    print(f"{len(document['rows'])} rows -> {args.out}")
    print("\n".join(table(document["rows"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
