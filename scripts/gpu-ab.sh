#!/usr/bin/env bash
# Two builds side by side on one GPU, the way a kernel change is judged here (docs/cuda-design.md, "How to measure"):
# the candidate's correctness tests first (a candidate that fails them, or for which none ran, is not
# timed), then the same `flashbench run` for each build, alternating so that drift (clocks,
# temperature, the power cap) falls on both (baseline first in odd rounds, candidate first in even
# ones, an even number of rounds), `flashbench compare` of each round's pair, and of all rounds
# together (each side's runs merged as rounds: `flashbench merge --rounds`), the verdict to go by.
#
#   scripts/gpu-ab.sh OUTPUT_DIR BASELINE_BUILD CANDIDATE_BUILD [flashbench run arguments...]
#
# A build is a folder holding flashbench, and tests/flashbench_tests for the candidate's tests. The run
# arguments (without --format and --out, which the script adds) default to v2 on the GPU at d = 64 and
# 128, N = 4K and 16K, B·N = 16K, H = 16, both masks, bf16. Environment: ROUNDS=2 (even), TEST_FILTER
# (a gtest filter; default the GPU tests of v2 against float64, the GPU workload tests of every
# variant, and the determinism tests), SKIP_TESTS=1 (time without testing).
#
# Writes OUTPUT_DIR/tests.txt, {baseline,candidate}-rK.json and .log, compare-rK.md,
# {baseline,candidate}.json (the rounds merged) and compare.md, and prints each comparison. Exit: 0;
# 1 a run or a comparison failed; 2 a usage error; 4 the candidate failed its tests, or none of them
# ran (nothing timed).
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
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]] || (( rounds % 2 != 0 )); then
  echo "gpu-ab.sh: ROUNDS must be a positive even number (both orders as often), not '$rounds'" >&2
  exit 2
fi
for build in "$baseline" "$candidate"; do
  if [ ! -x "$build/flashbench" ]; then
    echo "gpu-ab.sh: no flashbench in '$build'" >&2
    exit 2
  fi
done
tests=$candidate/tests/flashbench_tests
if [ "${SKIP_TESTS:-0}" != 1 ] && [ ! -x "$tests" ]; then
  echo "gpu-ab.sh: no tests/flashbench_tests in '$candidate' (SKIP_TESTS=1 times it untested)" >&2
  exit 2
fi
if ! mkdir -p "$out" 2>/dev/null; then
  echo "gpu-ab.sh: cannot create the output folder '$out'" >&2
  exit 2
fi

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  if ! "$tests" --gtest_filter="$filter" > "$out/tests.txt" 2>&1; then
    grep -E '^\[  FAILED  \]' "$out/tests.txt" | head -20 >&2 || true
    echo "gpu-ab.sh: the candidate fails its tests ($out/tests.txt): not timed" >&2
    exit 4
  fi
  # gtest passes a filter that matched nothing, and tests that skipped (no GPU, say): neither tested
  # the candidate. A test that skips for a reason of its own is left out with TEST_FILTER.
  if ! grep -qE '^\[  PASSED  \] [1-9]' "$out/tests.txt" || grep -qE '^\[  SKIPPED \] [0-9]' "$out/tests.txt"; then
    grep -E '^\[  PASSED  \]|^\[  SKIPPED \] [0-9]' "$out/tests.txt" >&2 || true
    echo "gpu-ab.sh: not every selected test of the candidate ran ($out/tests.txt): not timed" >&2
    exit 4
  fi
  grep -E '^\[  PASSED  \]' "$out/tests.txt"
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

# All rounds together: one side's runs as rounds of one run, judged on every sample, with the rounds'
# spread as the bar where it is wider than the threshold (by a build whose merge knows --rounds).
merger=""
for build in "$candidate" "$baseline"; do
  if "$build/flashbench" merge --help 2>/dev/null | grep -q -- "--rounds"; then merger=$build/flashbench; fi
done
if [ -z "$merger" ]; then
  echo "all rounds: neither build's merge knows --rounds; judge the rounds above together"
  exit 0
fi
for side in baseline candidate; do
  files=()
  for round in $(seq 1 "$rounds"); do files+=("$out/$side-r$round.json"); done
  if ! "$merger" merge --rounds "${files[@]}" --out "$out/$side.json" > /dev/null; then
    echo "gpu-ab.sh: merging the $side's rounds failed" >&2
    exit 1
  fi
done
echo "all $rounds rounds:"
if ! "$merger" compare "$out/baseline.json" "$out/candidate.json" --format md > "$out/compare.md"; then
  cat "$out/compare.md" >&2
  echo "gpu-ab.sh: the comparison of all rounds failed" >&2
  exit 1
fi
cat "$out/compare.md"
