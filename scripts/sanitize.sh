#!/usr/bin/env bash
# Builds flashbench with AddressSanitizer and UndefinedBehaviorSanitizer (any finding aborts) and
# runs the unit tests and the command-line tests on it; CI runs it after scripts/test.sh. They run
# small shapes, so the slower sanitized kernels stay within CI's time. Left to scripts/test.sh's
# unsanitized run: the README's and docs/usage.md's examples (scaled commands, minutes), the runs that stop a sweep by a
# signal after a measured time and resume it, the row outcomes at memory limits (row_outcomes_test), and the tests
# of the Python scripts and of Slurm (plots, GPU scripts, peers, daemons) and of the build's CUDA
# decision and install step, which add no C++ path (tests/README.md says where each test is).
# Environment: SANITIZE_BUILD_DIR (default build-sanitize), SANITIZE_EXCLUDE (a CTest -E regex
# replacing that list; '^$' runs everything).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-packages.sh cmake ninja-build g++ libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev \
  python3 python3-numpy python3-matplotlib

build_dir=${SANITIZE_BUILD_DIR:-build-sanitize}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHBENCH_SANITIZE=ON \
  -DFLASHBENCH_CUDA=OFF -DFLASHBENCH_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$build_dir" -j"$(nproc)"

# allocator_may_return_null: an allocation the system refuses is std::bad_alloc (an oom row), as
# without the sanitizer, not a sanitizer abort.
export ASAN_OPTIONS=abort_on_error=1:detect_stack_use_after_return=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
scripts_and_long_runs='^py\.(readme_examples|time_estimate|shard_resume_merge|row_outcomes|slurm|plot|bench_scripts|torch_grad|cuda_auto|install)_test$'
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" -E "${SANITIZE_EXCLUDE:-$scripts_and_long_runs}"
