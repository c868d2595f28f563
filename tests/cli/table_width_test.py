#!/usr/bin/env python3
"""`flashbench run`'s and `compare`'s tables keep to the width (COLUMNS when stdout is not a terminal,
else 100) and `--wide` prints every column; the legend under run's table names the marks printed and
the columns left out.

usage: tests/cli/table_width_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import os
import subprocess
import sys
from pathlib import Path
import tempfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402
RUN = ["run", "--seq", "96", "--heads", "1", "--head-dim", "16", "--max-time", "0.05", "--threads", "1"]
EVERY_COLUMN = ["variant", "fwd", "bwd", "bwd/fwd", "fwd rate", "bwd rate", "kept", "peak", "model peak", "peak-model",
                "time/std", "peak/std", "check", "status"]


def table(binary, columns, *extra):
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    result = subprocess.run([binary, *RUN, *extra], capture_output=True, text=True, timeout=300, env=env)
    if result.returncode != 0:
        print(result.stderr)
    return result.returncode, result.stdout


def header(text):
    return next((line for line in text.splitlines() if line.startswith("variant ")), "")


def main():
    binary = sys.argv[1]
    for columns, width in ((None, 100), (80, 80), (60, 60)):
        code, text = table(binary, columns)
        longest = max(len(line) for line in text.splitlines())
        check(code == 0 and longest <= width, f"COLUMNS={columns}: the longest line is {longest} <= {width}")
        for column in ("variant", "fwd", "bwd", "peak", "check", "status"):
            check(f" {column}" in f" {header(text)}", f"COLUMNS={columns}: {column} is shown")
        check("legend: " in text and "--wide adds the columns" in " ".join(text.split()),
              f"COLUMNS={columns}: the legend names the columns left out")
    code, text = table(binary, 60, "--wide")
    shown = header(text)
    check(code == 0 and all(column in shown for column in EVERY_COLUMN), f"--wide shows every column: {shown!r}")
    check(len(shown) > 100 and "--wide adds" not in text, "--wide ignores the width")

    with tempfile.TemporaryDirectory() as tmp:
        results = f"{tmp}/run.json"
        code, _ = table(binary, None, "--format", "json", "--out", results)
        for columns, extra in ((80, []), (70, []), (70, ["--wide"])):  # ratios and verdict need ~65
            env = dict(os.environ, COLUMNS=str(columns))
            result = subprocess.run([binary, "compare", results, results, *extra], capture_output=True, text=True,
                                    timeout=120, env=env)
            lines = result.stdout.splitlines()
            longest = max(len(line) for line in lines)
            verdicts = sum(line.endswith(" SAME") for line in lines)
            check(result.returncode == 0 and verdicts == 4, f"compare {extra} COLUMNS={columns}: 4 rows SAME")
            if extra:
                check(longest > columns and "fwd A" in result.stdout and "  p  " in result.stdout,
                      f"compare --wide shows the medians and p-values ({longest} columns)")
            else:
                check(longest <= columns and "--wide adds" in result.stdout,
                      f"compare COLUMNS={columns}: the longest line is {longest}")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
