#!/usr/bin/env python3
"""run --time-budget bounds the whole run: samples stop where a configuration's share is spent (the
row says so, in the table's warnings and the JSON's timing.time_budget), configurations left when the
budget is spent are not run and listed (meta.not_run) with a warning, and a run whose fixed costs
outgrow the budget says so instead of overrunning silently. --max-time's help says what it bounds.

usage: tests/cli/time_budget_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402

SMALL = ["--heads", "2", "--head-dim", "64", "--threads", "1", "--format", "json"]


def run(binary, *args):
    started = time.monotonic()
    done = subprocess.run([binary, "run", *args], capture_output=True, text=True, timeout=300)
    return done, time.monotonic() - started


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "budget.json"
        # A stopping rule that never settles (a noise target no machine meets, 20 s of samples an
        # implementation) under a budget of 3 s: the samples stop at the configurations' shares.
        done, elapsed = run(binary, "--seq", "512,1024", "--impl", "v2,standard", "--max-noise", "0.00001",
                            "--max-time", "20", "--time-budget", "3", *SMALL, "--out", str(out))
        check(done.returncode == 0, f"a run under --time-budget exits 0 ({done.returncode}: {done.stderr.strip()[-200:]})")
        check(elapsed < 30, f"it ends near its budget of 3 s, not at 4 x 20 s of samples ({elapsed:.1f} s)")
        rows = json.loads(out.read_text())["rows"] if out.exists() else []
        check(len(rows) == 4 and all(row["status"] == "ok" for row in rows), f"every row ran ({len(rows)})")
        cut = [row for row in rows if "time_budget" in row["timing"]]
        counts = [(row["impl"], row["timing"]["fwd"]["count"]) for row in rows]
        check(len(cut) == len(rows), f"each row says the budget cut its samples ({counts})")
        # Within the budget every row keeps --min-samples; where the checks and set-up alone outgrow
        # it (a slow or sanitized build), the rows after the budget's end keep one, and that is said.
        overrun = "the run took" in done.stderr
        least = 1 if overrun else 5
        check(all(count >= least for _, count in counts),
              f"samples: {least} or more each ({'an overrun, said' if overrun else 'within the budget'}): {counts}")
        check(all(row["timing"]["time_budget"].startswith("--time-budget: sampling stopped after") for row in cut),
              f"the note says what was cut: {cut[0]['timing']['time_budget'] if cut else None!r}")

        # A budget spent before the last configuration: it is not run, and that is said.
        out = Path(tmp) / "spent.json"
        done, elapsed = run(binary, "--seq", "2048,64", "--impl", "v2", "--min-samples", "20", "--time-budget", "0.2",
                            *SMALL, "--out", str(out))
        document = json.loads(out.read_text()) if out.exists() else {"meta": {}, "rows": []}
        not_run = document["meta"].get("not_run") or []
        check(done.returncode == 0 and "--time-budget 0.2 s spent" in done.stderr,
              f"a spent budget is a warning ({done.returncode}: {done.stderr.strip()[-200:]!r})")
        check([row["problem"]["seq"] for row in document["rows"]] == [2048] and len(not_run) == 1 and "N=64" in not_run[0],
              f"the configuration left is listed as not run: rows {[r['problem']['seq'] for r in document['rows']]}, "
              f"not_run {not_run}")

        # Fixed costs beyond the budget (the float64 check, set-up): said at the end, not silent.
        done, _ = run(binary, "--seq", "1024", "--impl", "v2", "--time-budget", "0.01", *SMALL, "--out",
                      str(Path(tmp) / "over.json"))
        check("--time-budget" in done.stderr and ("s of its 0.01 s" in done.stderr or "spent" in done.stderr),
              f"an overrun of the budget is said: {done.stderr.strip()[-200:]!r}")

        bad = subprocess.run([binary, "run", "--time-budget", "0"], capture_output=True, text=True, timeout=60)
        check(bad.returncode == 2 and "--time-budget must be a positive number" in bad.stderr,
              f"--time-budget 0 is a usage error: {bad.stderr.strip()!r}")

    text = subprocess.run([binary, "run", "--help"], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}).stdout
    check("never before --min-samples" in text and "--time-budget bounds the whole run" in text,
          "--max-time's help says what it bounds")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
