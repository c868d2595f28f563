#!/usr/bin/env python3
"""`run --export-json F --export-csv G --export-md H`: the table on stdout and the same rows in each
file, written atomically; two names for one file and a directory are usage errors before anything
runs; SIGINT still writes every finished row to every export.

usage: tests/cli/exports_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import csv
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def exports(tmp, stem):
    return {"json": tmp / f"{stem}.json", "csv": tmp / f"{stem}.csv", "md": tmp / f"{stem}.md"}


def export_flags(files):
    return [arg for kind, path in files.items() for arg in (f"--export-{kind}", str(path))]


def read_all(files):
    rows = json.loads(files["json"].read_text())
    with files["csv"].open() as f:
        csv_rows = list(csv.DictReader(f))
    return rows, csv_rows, files["md"].read_text()


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = exports(tmp, "sweep")
        done = subprocess.run([binary, "run", "--seq", "64,96", "--heads", "1", "--variant", "v2,standard",
                               "--max-time", "0.02", *export_flags(files)], capture_output=True, text=True, timeout=300)
        check(done.returncode == 0, f"exit {done.returncode} {done.stderr.strip()[-300:]!r}")
        check("B=1 H=1 N=64" in done.stdout and "B=1 H=1 N=96" in done.stdout and "{" not in done.stdout,
              "the table on stdout")
        if all(path.exists() for path in files.values()):
            document, csv_rows, md = read_all(files)
            json_rows = [(r["impl"], r["problem"]["seq"], r["timing"]["bwd"]["median_ms"]) for r in document["rows"]]
            csv_keyed = [(r["impl"], int(r["seq"]), float(r["bwd_median_ms"])) for r in csv_rows]
            check(len(json_rows) == 4 and document["meta"].get("complete") is True, f"json: 4 rows, complete")
            check([k[:2] for k in csv_keyed] == [k[:2] for k in json_rows], f"csv: the json's rows {csv_keyed}")
            check(all(abs(a[2] - b[2]) <= 1e-6 * b[2] for a, b in zip(csv_keyed, json_rows)),
                  "csv: the same measurements as the json")
            check(md.count("### cpu: ") == 2 and md.count("| v2 ") + md.count("| standard ") == 4, "md: a table per problem")
            check(not list(tmp.glob(".sweep.*")), "no temporary file left")
        else:
            check(False, f"every export written: {[str(p) for p in files.values() if not p.exists()]}")

        # Mistakes cost nothing: a usage error, one line, before anything runs.
        for args, what in ((["--export-json", str(tmp / "a.json"), "--out", str(tmp / "a.json")], "--export-json = --out"),
                           (["--export-csv", str(tmp / "b"), "--export-md", str(tmp / "b")], "two exports, one file"),
                           (["--export-md", str(tmp)], "an export naming a directory")):
            bad = subprocess.run([binary, "run", "--seq", "64", *args], capture_output=True, text=True, timeout=60)
            check(bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and not bad.stdout,
                  f"{what}: exit {bad.returncode} {bad.stderr.strip()!r}")

        # SIGINT after a few configurations: every export holds every finished row.
        files = exports(tmp, "stopped")
        seqs = ",".join(str(n) for n in range(64, 576, 32))
        process = subprocess.Popen([binary, "run", "--seq", seqs, "--heads", "2", "--max-time", "0.4", "--max-noise",
                                    "0.000001", *export_flags(files)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2.5)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=300)
        check(process.returncode == 130 and "stopped by SIGINT" in err, f"SIGINT: exit {process.returncode}")
        if all(path.exists() for path in files.values()):
            document, csv_rows, md = read_all(files)
            rows = document["rows"]
            check(document["meta"].get("complete") is False and document["meta"].get("not_run"),
                  "json export: marked incomplete, lists what did not run")
            check(len(rows) >= 4 and len(rows) % 4 == 0 and len(csv_rows) == len(rows),
                  f"json and csv: the same whole configurations ({len(rows)}, {len(csv_rows)} rows)")
            check(md.count("### cpu: ") == len(rows) // 4, f"md: a table per finished configuration ({md.count('### cpu: ')})")
            table_problems = sum(bool(re.match(r"cpu: B=\S+ H=\S+ N=", line)) for line in out.splitlines())
            check(table_problems == len(rows) // 4, f"the table on stdout has the same ({table_problems})")
        else:
            check(False, "SIGINT: every export written")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
