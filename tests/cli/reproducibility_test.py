#!/usr/bin/env python3
"""--seed reproduces the inputs, and each row says whether its results come again bit for bit;
fp16 logits beyond fp16's range are named on the row (JSON `hazards`, a warning under the table),
never hidden in a passed check.

usage: tests/cli/reproducibility_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402
QUICK = ["--seq", "48", "--heads", "2", "--head-dim", "8", "--layers", "2", "--min-samples", "5",
         "--max-samples", "5", "--warmup", "0", "--max-time", "0.05"]


def rows(binary, *args):
    result = subprocess.run([binary, "run", *QUICK, *args, "--format", "json"], capture_output=True, text=True,
                            timeout=300)
    check(result.returncode in (0, 1), f"run {' '.join(args)}: exit {result.returncode} {result.stderr.strip()[:200]!r}")
    return {row["impl"]: row for row in json.loads(result.stdout)["rows"]}


def main():
    binary = sys.argv[1]
    first, again, other = rows(binary, "--seed", "5"), rows(binary, "--seed", "5"), rows(binary, "--seed", "6")
    check(len(first) == 4, f"four implementations ran ({sorted(first)})")
    for impl, row in first.items():
        r, a, o = row["reproducibility"], again[impl]["reproducibility"], other[impl]["reproducibility"]
        check(r["seed"] == 5 and o["seed"] == 6, f"{impl}: the seed is recorded")
        check(r["inputs_hash"] == a["inputs_hash"], f"{impl}: --seed 5 twice, the same inputs")
        check(r["inputs_hash"] != o["inputs_hash"], f"{impl}: --seed 6, other inputs")
        check(r["inputs_hash"] == first["standard"]["reproducibility"]["inputs_hash"], f"{impl}: inputs shared")
        check(r["deterministic"] is True, f"{impl}: the CPU gives the same bits twice")
        check(r["results_hash"] == a["results_hash"], f"{impl}: --seed 5 twice, the same results")
        check(r["results_hash"] != o["results_hash"], f"{impl}: --seed 6, other results")
        check(row["hazards"] == [], f"{impl}: no hazard at scale 1")

    # fp16 with Q, K, V times 200 (d = 8): rows of norm ≈ 200 · sqrt(8), so the logits' bound from the
    # inputs' norms, scale · max|q_i| · max|k_j|, is past 65504 (they may reach it).
    overflow = rows(binary, "--dtype", "fp16", "--input-scale", "200", "--seed", "5")
    for impl, row in overflow.items():
        hazards = row["hazards"]
        check(len(hazards) == 1 and hazards[0].startswith("fp16 overflow: the logits may reach |S| = "),
              f"fp16 x200 {impl}: the hazard is named ({hazards})")
        check(hazards[0] in row["warnings"] if hazards else False, f"fp16 x200 {impl}: and is a warning")
        check(row["reproducibility"]["input_scale"] == 200, f"fp16 x200 {impl}: the scale is recorded")
        if row["check"] is not None:
            check(math.isfinite(row["check"]["tolerance"]), f"fp16 x200 {impl}: the check had a finite bar")
        print(f"   {impl}: {row['status']} {row['reason'][:100]!r}")
    table = subprocess.run([binary, "run", *QUICK, "--dtype", "fp16", "--input-scale", "200", "--variant", "v2"],
                           capture_output=True, text=True, timeout=300)
    check("fp16 overflow" in table.stdout, "the table shows the hazard under the row")
    bf16 = rows(binary, "--dtype", "bf16", "--input-scale", "200", "--seed", "5")
    check(all(row["hazards"] == [] for row in bf16.values()), "bf16 x200: no hazard (its range is fp32's)")

    return summary()


if __name__ == "__main__":
    sys.exit(main())
