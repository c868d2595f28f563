#!/usr/bin/env python3
"""run --rounds R and compare: the same small sweep run twice, one run after the other, comes out
SAME on every row — or UNSURE where, and only where, the load recorded on the slower run's machine
could explain the difference — never FASTER or SLOWER; and --fail-on-regression exits 0. Each row
carries R round medians per phase, the verdict is reached on them, and the rows' samples are every
round's. A copy of the second run with every sample of one row doubled (that row's samples steadied
first) is SLOWER there and exits 3.

Two runs one after the other drift apart on a 2-core machine: under the sanitizer the second run of
a pair came out 6-10 % slower on every row (ratios 1.06-1.10, no other load recorded), which is the
machine, not noise that rounds could absorb. So the identical pair is judged with --threshold 0.15
(the doubled row, at the default 5 %, shows that compare still finds a real change), and a pair that
still comes out FASTER or SLOWER is run once more: only a second such pair fails the test.

usage: tests/cli/compare_rounds_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROUNDS = 5
SWEEP = ["--seq", "128", "--heads", "2", "--head-dim", "32", "--variant", "all", "--threads", "1",
         "--max-time", "0.05", "--min-samples", "5", "--rounds", str(ROUNDS), "--format", "json"]

# What two back-to-back runs of one binary may differ by on a small shared machine (see above).
DRIFT = ["--threshold", "0.15"]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402
from timings import steady  # noqa: E402


def identical_pair(binary, tmp, attempt):
    """Two runs of the same sweep, one after the other; (runs, compare's JSON, --fail-on-regression's
    exit status, the lines of the pairs that are neither SAME nor UNSURE with a load that explains it)."""
    runs = [tmp / f"first-{attempt}.json", tmp / f"second-{attempt}.json"]
    for path in runs:
        result = subprocess.run([binary, "run", *SWEEP, "--out", str(path)], capture_output=True, text=True)
        check(result.returncode == 0, f"run --rounds {ROUNDS} exits 0 ({result.stderr.strip()[:200]})")
    result = subprocess.run([binary, "compare", "--format", "json", *DRIFT, *map(str, runs)], capture_output=True,
                            text=True)
    check(result.returncode == 0, f"compare exits 0 ({result.stderr.strip()[:200]})")
    document = json.loads(result.stdout)
    different = []
    for pair in document["pairs"]:
        for phase in ("fwd", "bwd"):
            p = pair[phase]
            explained = p["verdict"] == "UNSURE" and p["load_bound"] > 1
            if not (p["verdict"] == "SAME" or explained):
                different.append(f'{pair["impl_b"]} {phase}: {p["verdict"]} (ratio {p["ratio"]:.3f}, p {p["p_value"]}, '
                                 f'round noise {p["round_noise"]:.3f}, load bound {p["load_bound"]:.2f})')
    failing = subprocess.run([binary, "compare", "--fail-on-regression", *DRIFT, *map(str, runs)],
                             capture_output=True, text=True)
    return runs, document, failing.returncode, different


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        runs, document, failing, different = identical_pair(binary, tmp, 1)
        if different or failing != 0:
            print(f"note: the first pair came out different ({'; '.join(different) or f'exit {failing}'}); "
                  "running the pair once more")
            runs, document, failing, different = identical_pair(binary, tmp, 2)
        rows = json.loads(runs[0].read_text())["rows"]
        check(len(rows) == 4 and all(row["status"] == "ok" for row in rows), f"{len(rows)} rows, all ok")
        for row in rows:
            for phase in ("fwd", "bwd"):
                timing = row["timing"][phase]
                medians = timing.get("round_medians_ms", [])
                check(len(medians) == ROUNDS, f'{row["impl"]} {phase}: {len(medians)} round medians')
                check(timing["count"] >= 5 * ROUNDS, f'{row["impl"]} {phase}: {timing["count"]} samples over the rounds')
                check(min(timing["samples_ms"]) <= min(medians) and max(medians) <= max(timing["samples_ms"]),
                      f'{row["impl"]} {phase}: round medians lie within the samples')

        pairs = document["pairs"]
        check(len(pairs) == 4, f"{len(pairs)} pairs")
        for pair in pairs:
            for phase in ("fwd", "bwd"):
                p = pair[phase]
                check(p["basis"] == "rounds" and p["count_a"] == ROUNDS == p["count_b"],
                      f'{pair["impl_b"]} {phase}: judged on {p["count_a"]} and {p["count_b"]} {p["basis"]}')
        check(not different, "identical runs are SAME, or UNSURE where the load explains it: "
                             + ("; ".join(different) or "all of them"))
        check(failing == 0, f"--fail-on-regression on identical runs exits {failing}")

        # One row of the second run made twice as slow in every sample of every round. Its rounds are
        # first steadied to +-0.4 % about their median on both sides: on a machine at load ~100 (a
        # shared 16-CPU host) identical runs came out 1.4x apart, and a doubling inside that spread
        # reads SAME; what this part tests is that compare finds a change beyond the noise.
        base = json.loads(runs[1].read_text())
        steady(base["rows"][2]["timing"]["bwd"])
        steady_path = tmp / "steady.json"
        steady_path.write_text(json.dumps(base))
        second = json.loads(steady_path.read_text())
        timing = second["rows"][2]["timing"]["bwd"]
        for key in ("samples_ms", "round_medians_ms"):
            timing[key] = [2 * x for x in timing[key]]
        timing["median_ms"] *= 2
        # Quiet machines on both sides, so that only the timings speak.
        for document_meta in (second["meta"],):
            document_meta["environment"]["load_average_start"] = None
            document_meta["environment"]["load_average_end"] = None
        slower = tmp / "slower.json"
        slower.write_text(json.dumps(second))
        result = subprocess.run([binary, "compare", "--fail-on-regression", "--format", "json", str(steady_path), str(slower)],
                                capture_output=True, text=True)
        check(result.returncode == 3, f"a twice slower row exits {result.returncode} (3: a regression)")
        verdicts = [pair["bwd"]["verdict"] for pair in json.loads(result.stdout)["pairs"]] if result.stdout else []
        check(verdicts[2:3] == ["SLOWER"], f"the doubled row is SLOWER: {verdicts}")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
