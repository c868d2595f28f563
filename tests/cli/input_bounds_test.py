#!/usr/bin/env python3
"""Every number and file the real binary is given is bounded, and compare's regression gate fires:

1. --threads 100000 and OMP_NUM_THREADS=100000 run on the hardware's threads with a one-line
   warning naming where the count came from (both were a SIGSEGV).
2. A sweep or results file nested 200,000 deep is a one-line error (a SIGSEGV: the stack).
3. --config /dev/zero, a directory, or a file past the cap is refused at once (/dev/zero was read
   forever); a pipe is read.
4. --seed past 64 bits is a usage error naming --seed (it was saturated to 2^64 - 1).
5. compare judges load as a difference between the sides: times doubled under the same heavy load
   on both sides are SLOWER and --fail-on-regression exits 3 (it was UNSURE, exit 0); a load on the
   slower side alone that could explain the change keeps it UNSURE; the same load on the faster
   side does not; compare --baseline standard on one loaded run calls a 1.5x slower backward SLOWER.
   docs/usage.md's recipe (run, change, run, compare) catches a 1.3x slowdown made on
   purpose (FLASHBENCH_INJECT_SLOWDOWN, the test hook that waits out the extra time).

usage: tests/cli/input_bounds_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402
from timings import steadied  # noqa: E402

SMALL = ["--seq", "64", "--heads", "1", "--head-dim", "16", "--variant", "v2", "--max-time", "0.05"]
DEEP = 200_000


def run(binary, args, env=None, timeout=120):
    """The finished process; one that ran past `timeout` (a read without end) is killed and reported
    with exit status None."""
    try:
        return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, None, "", f"(still running after {timeout} s)")


def one_line_error(result, code, words, what):
    lines = result.stderr.strip().splitlines()
    check(result.returncode == code and len(lines) == 1 and words in result.stderr,
          f"{what}: exit {code}, one line naming '{words}' (exit {result.returncode}: {result.stderr.strip()[:200]})")


def threads(binary):
    for label, args, env, source in (("--threads 100000", ["--threads", "100000"], None, "--threads 100000"),
                                     ("OMP_NUM_THREADS=100000", [], {"OMP_NUM_THREADS": "100000"},
                                      "OMP_NUM_THREADS = 100000")):
        result = run(binary, ["run", *SMALL, *args, "--format", "json"], env=env)
        warnings = [line for line in result.stderr.splitlines() if source in line]
        check(result.returncode == 0 and len(warnings) == 1 and "hardware threads" in warnings[0],
              f"{label}: runs, one warning naming it (exit {result.returncode}: {result.stderr.strip()[:200]})")
        if result.returncode == 0:
            rows = json.loads(result.stdout)["rows"]
            check(all(0 < row["threads"] <= os.cpu_count() for row in rows),
                  f"{label}: the rows ran at most {os.cpu_count()} threads ({[row['threads'] for row in rows]})")


def deep_files(binary, tmp):
    nested = "[" * DEEP + "]" * DEEP
    sweep = tmp / "deep-sweep.json"
    sweep.write_text('{"seq": ' + nested + "}")
    one_line_error(run(binary, ["run", "--config", str(sweep), "--dry-run"]), 2, "nested deeper than 64",
                   "a sweep file 200,000 deep")
    results = tmp / "deep-results.json"
    results.write_text('{"rows": [' + '{"a":' * DEEP + "1" + "}" * DEEP + "]}")
    one_line_error(run(binary, ["compare", str(results), str(results)]), 2, "nested deeper than 64",
                   "compare on a results file 200,000 deep")
    one_line_error(run(binary, ["merge", str(results), str(results), "--out", str(tmp / "merged.json")]), 2, "nested deeper than 64",
                   "merge of a results file 200,000 deep")
    lines = tmp / "deep-results.jsonl"
    lines.write_text(nested + "\n")
    one_line_error(run(binary, ["compare", str(lines), str(lines)]), 2, "nested deeper than 64",
                   "compare on a jsonl line 200,000 deep")


def file_kinds(binary, tmp):
    one_line_error(run(binary, ["run", "--config", "/dev/zero"], timeout=20), 2, "is a character device",
                   "--config /dev/zero")
    one_line_error(run(binary, ["run", "--config", str(tmp)]), 2, "is a directory", "--config a directory")
    one_line_error(run(binary, ["run", *SMALL, "--peak-file", "/dev/zero"], timeout=20), 2, "is a character device",
                   "--peak-file /dev/zero")
    one_line_error(run(binary, ["compare", "/dev/zero", "/dev/zero"], timeout=20), 2, "is a character device",
                   "compare /dev/zero")
    big = tmp / "big.json"
    with open(big, "wb") as file:
        file.truncate(64 << 20)  # sparse: 64 MiB of nothing, past a sweep file's cap
    one_line_error(run(binary, ["run", "--config", str(big)], timeout=20), 2, "is larger than", "--config of 64 MiB")
    fifo = tmp / "sweep.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text('{"seq": [64], "heads": [1]}'))
    writer.start()
    result = run(binary, ["run", "--config", str(fifo), "--dry-run"], timeout=20)
    writer.join()
    check(result.returncode == 0 and "N=64" in result.stdout,
          f"--config a pipe: read (exit {result.returncode}: {result.stderr.strip()[:200]})")


def seeds(binary):
    one_line_error(run(binary, ["run", *SMALL, "--dry-run", "--seed", str(2 ** 65)]), 2, "--seed",
                   "--seed 2^65")
    one_line_error(run(binary, ["run", *SMALL, "--dry-run", "--seed", "-1"]), 2, "--seed", "--seed -1")
    result = run(binary, ["run", *SMALL, "--seed", str(2 ** 64 - 1), "--format", "json"])
    recorded = json.loads(result.stdout)["meta"]["sweep"]["settings"]["seed"] if result.returncode == 0 else None
    check(recorded == 2 ** 64 - 1, f"--seed 2^64 - 1 is taken as given (recorded {recorded})")


def scaled(document, factor, other_cpu_load, load_average):
    """The document with every time multiplied by `factor` and the given load in its meta."""
    result = copy.deepcopy(document)
    for row in result["rows"]:
        for phase in ("fwd", "bwd"):
            timing = row["timing"][phase]
            for key in ("median_ms", "mean_ms", "min_ms", "max_ms", "stddev_ms", "ci95_low_ms", "ci95_high_ms"):
                if isinstance(timing.get(key), (int, float)):
                    timing[key] *= factor
            for key in ("samples_ms", "round_medians_ms"):
                timing[key] = [value * factor for value in timing.get(key, [])]
    environment = result["meta"]["environment"]
    environment["other_cpu_load"] = other_cpu_load
    average = {"1m": load_average, "5m": load_average, "15m": load_average}
    environment["load_average_start"] = environment["load_average_end"] = average
    return result


def compare_verdicts(binary, tmp):
    base = tmp / "base.json"
    result = run(binary, ["run", *SMALL, "--threads", "1", "--rounds", "4", "--format", "json", "--out", str(base)])
    check(result.returncode == 0, f"the base run ({result.stderr.strip()[:200]})")
    if result.returncode != 0:
        return
    document = steadied(json.loads(base.read_text()))
    cpus = document["meta"]["environment"]["logical_cpus"]
    heavy = 10.0 * cpus  # a load that alone could make a run 10x slower

    def verdict(a, b, name):
        paths = [tmp / f"{name}-a.json", tmp / f"{name}-b.json"]
        for path, side in zip(paths, (a, b)):
            path.write_text(json.dumps(side))
        gated = run(binary, ["compare", "--fail-on-regression", *map(str, paths)])
        shown = run(binary, ["compare", "--format", "json", *map(str, paths)])
        verdicts = [pair["verdict"] for pair in json.loads(shown.stdout)["pairs"]] if shown.returncode == 0 else []
        return gated.returncode, verdicts

    # The case: every time twice, the load average high in both files (no other_cpu_load).
    code, verdicts = verdict(scaled(document, 1, None, heavy), scaled(document, 2, None, heavy), "same-average")
    check(code == 3 and verdicts and set(verdicts) == {"SLOWER"},
          f"2x under the same load average on both sides: SLOWER, exit 3 (exit {code}, {verdicts})")
    code, verdicts = verdict(scaled(document, 1, heavy, 0), scaled(document, 2, heavy, 0), "same-other")
    check(code == 3 and verdicts and set(verdicts) == {"SLOWER"},
          f"2x with the same other_cpu_load on both sides: SLOWER, exit 3 (exit {code}, {verdicts})")
    # A load average left by a previous run of flashbench, its other processes idle: no excuse.
    code, verdicts = verdict(scaled(document, 1, 0.0, 0), scaled(document, 1.6, 0.0, 1.2 * cpus), "own-leftover")
    check(code == 3 and verdicts and set(verdicts) == {"SLOWER"},
          f"1.6x after a load average flashbench left (other_cpu_load 0): SLOWER, exit 3 (exit {code}, {verdicts})")
    # Injected load both ways: on the slower side it could explain 1.3x; on the faster side not.
    code, verdicts = verdict(scaled(document, 1, 0.0, 0), scaled(document, 1.3, heavy, heavy), "load-on-slower")
    check(code == 0 and verdicts and set(verdicts) == {"UNSURE"},
          f"1.3x with heavy load on the slower side only: UNSURE, exit 0 (exit {code}, {verdicts})")
    code, verdicts = verdict(scaled(document, 1, heavy, heavy), scaled(document, 1.3, 0.0, 0), "load-on-faster")
    check(code == 3 and verdicts and set(verdicts) == {"SLOWER"},
          f"1.3x with heavy load on the faster side only: SLOWER, exit 3 (exit {code}, {verdicts})")
    # Far beyond any load: 20x against a load that explains at most ~10x.
    code, verdicts = verdict(scaled(document, 1, 0.0, 0), scaled(document, 20, heavy, heavy), "far-beyond")
    check(code == 3 and verdicts and set(verdicts) == {"SLOWER"},
          f"20x against a load that explains ~10x: SLOWER, exit 3 (exit {code}, {verdicts})")


def baseline_under_load(binary, tmp):
    """compare --baseline standard judges rows of one run, which all ran under the same load: that
    load explains none of a 1.5x slower backward."""
    path = tmp / "two.json"
    result = run(binary, ["run", "--seq", "64", "--heads", "1", "--head-dim", "16", "--max-time", "0.05",
                          "--variant", "standard,v2", "--threads", "1", "--rounds", "4",
                          "--format", "json", "--out", str(path)])
    check(result.returncode == 0, f"the two-variant run ({result.stderr.strip()[:200]})")
    if result.returncode != 0:
        return
    document = steadied(json.loads(path.read_text()))
    heavy = 10.0 * document["meta"]["environment"]["logical_cpus"]
    loaded = scaled(document, 1, heavy, heavy)
    standard = next(row for row in loaded["rows"] if row["variant"] == "standard")
    other = next(row for row in loaded["rows"] if row["variant"] == "v2")
    other["timing"] = copy.deepcopy(standard["timing"])
    timing = other["timing"]["bwd"]
    for key in ("median_ms", "mean_ms", "min_ms", "max_ms", "stddev_ms", "ci95_low_ms", "ci95_high_ms"):
        if isinstance(timing.get(key), (int, float)):
            timing[key] *= 1.5
    for key in ("samples_ms", "round_medians_ms"):
        timing[key] = [value * 1.5 for value in timing.get(key, [])]
    path.write_text(json.dumps(loaded))
    gated = run(binary, ["compare", "--baseline", "standard", "--fail-on-regression", str(path)])
    check(gated.returncode == 3 and "SLOWER" in gated.stdout,
          f"--baseline standard: a 1.5x slower backward under the run's one heavy load is SLOWER, exit 3 "
          f"(exit {gated.returncode}: {gated.stdout.strip()[-300:]})")


def readme_recipe(binary, tmp):
    """run, change, run, compare: the change a 1.3x slowdown of every timed pass. On a shared machine
    another process can load one run more than the other (the verdict is then UNSURE, rightly), so a
    pair that is not SLOWER is made once more before the test fails."""
    sweep = ["--seq", "128", "--heads", "2", "--head-dim", "32", "--variant", "v2", "--threads", "1",
             "--max-time", "0.05", "--rounds", "4", "--format", "json"]
    outcomes = []
    for attempt in range(2):
        before, after = tmp / f"before-{attempt}.json", tmp / f"after-{attempt}.json"
        first = run(binary, ["run", *sweep, "--out", str(before)])
        second = run(binary, ["run", *sweep, "--out", str(after)], env={"FLASHBENCH_INJECT_SLOWDOWN": "1.3"})
        if first.returncode or second.returncode:
            check(False, f"the recipe's runs ({first.stderr.strip()[:200]} {second.stderr.strip()[:200]})")
            return
        gated = run(binary, ["compare", "--fail-on-regression", str(before), str(after)])
        outcomes.append(f"exit {gated.returncode}: {gated.stdout.strip()[-300:]}")
        if gated.returncode == 3:
            break
    check(outcomes and outcomes[-1].startswith("exit 3"),
          f"docs/usage.md's recipe catches a 1.3x slowdown: exit 3 ({' / '.join(outcomes)})")


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        threads(binary)
        deep_files(binary, tmp)
        file_kinds(binary, tmp)
        seeds(binary)
        compare_verdicts(binary, tmp)
        baseline_under_load(binary, tmp)
        readme_recipe(binary, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
