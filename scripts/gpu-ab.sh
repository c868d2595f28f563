#!/usr/bin/env bash
# Two builds side by side on one GPU, the way a kernel change is judged here (docs/cuda-notes.md):
# the candidate's correctness tests first (a candidate that fails them is not timed), then the same
# `flashbench run` for each build, alternating so that drift (clocks, temperature, the power cap)
# falls on both (baseline first in odd rounds, candidate first in even ones), and `flashbench compare`
# of each round's pair.
#
#   scripts/gpu-ab.sh OUTPUT_DIR BASELINE_BUILD CANDIDATE_BUILD [flashbench run arguments...]
#
# A build is a folder holding flashbench, and tests/flashbench_tests for the candidate's tests. The run
# arguments (without --format and --out, which the script adds) default to v2 on the GPU at d = 64 and
# 128, N = 4K and 16K, B·N = 16K, H = 16, both masks, bf16. Environment: ROUNDS=2, TEST_FILTER (a gtest
# filter; default the v2 GPU tests), SKIP_TESTS=1 (time without testing).
#
# Writes OUTPUT_DIR/tests.txt, {baseline,candidate}-rK.json and .log, compare-rK.md, and prints each
# comparison. Exit: 0; 1 a run or a comparison failed; 2 a usage error; 4 the candidate failed its
# tests (nothing timed).
set -euo pipefail
usage="usage: scripts/gpu-ab.sh OUTPUT_DIR BASELINE_BUILD CANDIDATE_BUILD [flashbench run arguments...]"
if [ $# -lt 3 ]; then
  echo "$usage" >&2
  exit 2
fi
out=$1 baseline=$2 candidate=$3
shift 3
if [ $# -eq 0 ]; then
  set -- --backend cuda --impl v2 --seq 4096,16384 --tokens 16384 --heads 16 --head-dim 64,128 --mask both \
    --dtype bf16 --max-time 0.6
fi
rounds=${ROUNDS:-2}
filter=${TEST_FILTER:-'Gpu/CudaVsFloat64.*v2*:Gpu/CudaWorkloads.*:Determinism*'}
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu-ab.sh: ROUNDS must be a positive integer, not '$rounds'" >&2
  exit 2
fi
for build in "$baseline" "$candidate"; do
  if [ ! -x "$build/flashbench" ]; then
    echo "gpu-ab.sh: no flashbench in '$build'" >&2
    exit 2
  fi
done
mkdir -p "$out"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  tests=$candidate/tests/flashbench_tests
  if [ ! -x "$tests" ]; then
    echo "gpu-ab.sh: no tests/flashbench_tests in '$candidate' (SKIP_TESTS=1 times it untested)" >&2
    exit 2
  fi
  if ! "$tests" --gtest_filter="$filter" > "$out/tests.txt" 2>&1; then
    grep -E '^\[  FAILED  \]' "$out/tests.txt" | head -20 >&2 || true
    echo "gpu-ab.sh: the candidate fails its tests ($out/tests.txt): not timed" >&2
    exit 4
  fi
  grep -E '^\[  PASSED  \]|^\[  SKIPPED \] [0-9]' "$out/tests.txt" || true
fi

for round in $(seq 1 "$rounds"); do
  order="baseline candidate"
  if (( round % 2 == 0 )); then order="candidate baseline"; fi
  for side in $order; do
    build=$baseline
    if [ "$side" = candidate ]; then build=$candidate; fi
    if ! "$build/flashbench" run "$@" --format json --out "$out/$side-r$round.json" > "$out/$side-r$round.log" 2>&1; then
      echo "gpu-ab.sh: the $side's run of round $round failed ($out/$side-r$round.log)" >&2
      exit 1
    fi
  done
  echo "round $round ($order):"
  if ! "$baseline/flashbench" compare "$out/baseline-r$round.json" "$out/candidate-r$round.json" --format md \
    > "$out/compare-r$round.md"; then
    cat "$out/compare-r$round.md" >&2
    echo "gpu-ab.sh: the comparison of round $round failed" >&2
    exit 1
  fi
  cat "$out/compare-r$round.md"
done
