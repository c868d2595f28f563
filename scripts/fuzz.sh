#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, with ASan and UBSan) and runs each for SECONDS:
#   scripts/fuzz.sh SECONDS [sweep|npy|results ...]      (default: all three, one after the other)
# CI runs each for a short fixed time; run it long (e.g. 3600) before a release. Each target starts
# from its seed corpus in tests/fuzz/corpus/<name>/ and keeps what it learns in
# build-fuzz/corpus/<name>/. A crash stops that target and fails the script; the input that crashed
# is in build-fuzz/artifacts/<name>/: fix the parser, then add the input to tests/fuzz/corpus/<name>/,
# where every build's unit tests replay it (tests/fuzz/corpus_test.cpp).
# Environment: FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ || "$1" -lt 1 ]]; then
  echo "usage: scripts/fuzz.sh SECONDS [sweep|npy|results ...]" >&2
  exit 2
fi
seconds=$1
shift
targets=("$@")
((${#targets[@]})) || targets=(sweep npy results)
for target in "${targets[@]}"; do
  [[ -d tests/fuzz/corpus/$target ]] || { echo "fuzz: unknown target '$target' (sweep, npy, results)" >&2; exit 2; }
done

# The project's own packages, then clang with libFuzzer (libclang-rt) and OpenMP for clang (libomp).
scripts/install-packages.sh cmake ninja-build g++ libcli11-dev libfmt-dev nlohmann-json3-dev \
  clang libclang-rt-14-dev libomp-dev

build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHBENCH_FUZZ=ON \
  -DFLASHBENCH_BUILD_TESTS=OFF -DFLASHBENCH_CUDA=OFF -DFLASHBENCH_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

# The words of each target's format, so that mutations reach keys and headers rather than noise.
declare -A dictionary=([sweep]=json [results]=json [npy]=npy)
for target in "${targets[@]}"; do
  mkdir -p "$build_dir/corpus/$target" "$build_dir/artifacts/$target"
  echo "fuzz: $target for ${seconds} s" >&2
  # -timeout: an input taking over 10 s is a hang; -rss_limit_mb: one over 2 GiB a runaway
  # allocation. Both count as findings. -max_len 1 MiB: long enough for JSON nested far past the
  # depth limit and for .npy headers past NumPy's 10000-byte cap (libFuzzer's default is 4 KiB).
  if ! "$build_dir/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -max_len=1048576 -dict="tests/fuzz/dict/${dictionary[$target]}.dict" \
       -artifact_prefix="$build_dir/artifacts/$target/" "$build_dir/corpus/$target" "tests/fuzz/corpus/$target" \
       2>"$build_dir/fuzz_$target.log"; then
    tail -n 60 "$build_dir/fuzz_$target.log" >&2
    echo "fuzz: $target found a defect; the input is in $build_dir/artifacts/$target/" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^Done" "$build_dir/fuzz_$target.log" >&2 || true
done
