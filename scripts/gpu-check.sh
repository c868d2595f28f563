#!/usr/bin/env bash
# Build flashbench with the CUDA backend on a GPU machine, check its machine code
# (scripts/sass_check.py: HGMMA in every sm_90a kernel, no local memory there; OUTPUT_DIR/sass.md)
# and run the whole test suite there, the GPU tests included (they skip with "no CUDA device"
# elsewhere). Logs go to OUTPUT_DIR.
#
#   scripts/gpu-check.sh OUTPUT_DIR [BUILD_DIR]
#
# TESTS=gpu runs only the tests that touch the GPU (the CUDA and cuDNN GoogleTests and the CLI tests
# that drive `--backend cuda` or its plugins) instead of the whole suite: the CPU tests are CI's, and
# a shared GPU host's load makes their timing-sensitive ones flaky there.
#
# Needs nvcc (CUDA 12 or newer), CMake >= 3.20, Ninja and a C++20 compiler. A machine where nothing
# can be installed may lack fmt, nlohmann/json, CLI11 and GoogleTest: scripts/gpu-deps.sh, run on a
# machine that has them, copies their headers and GoogleTest's sources into .deps/, which this
# script then uses (fmt header-only). BUILD_DIR (default build-gpu) is configured by this script
# only when it has no CMake cache yet; a folder configured before must have FLASHBENCH_CUDA=ON and
# the tests on, and is built with the options it has (another script's build is never changed);
# one configured otherwise is refused with exit status 3.
set -euo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTPUT_DIR [BUILD_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build-gpu}
mkdir -p "$out"
jobs=$(nproc)

# A build folder that already has a CMake cache keeps its options: it is reconfigured with none,
# after checking that it builds what this script tests (FLASHBENCH_CUDA=ON, the tests not off); one
# configured otherwise (scripts/setup.sh's build/, say) is refused, not changed.
cache=$build/CMakeCache.txt
cached() { sed -n "/^$1:[A-Za-z]*=/{s/^[^=]*=//p;q}" "$cache" | tr '[:lower:]' '[:upper:]'; }
cmake_args=()
if [ -e "$cache" ]; then
  cuda=$(cached FLASHBENCH_CUDA)
  tests=$(cached FLASHBENCH_BUILD_TESTS)
  case "$tests" in OFF | FALSE | NO | N | 0) tests_off=1 ;; *) tests_off=0 ;; esac
  if [ "$cuda" != ON ] || [ "$tests_off" = 1 ]; then
    echo "gpu-check: $build is configured with FLASHBENCH_CUDA=${cuda:-unset} FLASHBENCH_BUILD_TESTS=${tests:-unset}; this script needs ON and ON and changes no other build: give it another BUILD_DIR" >&2
    exit 3
  fi
else
  # The python3 on PATH (the one with numpy, e.g. a framework's environment) runs the CLI tests.
  cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHBENCH_CUDA=ON -DPython3_EXECUTABLE="$(command -v python3)")
  deps=$root/.deps
  if [ -d "$deps/include" ]; then
    cmake_args+=(-DFLASHBENCH_DEPS_DIR="$deps")
  fi
  if [ -d "$deps/googletest" ] && [ ! -e /usr/include/gtest/gtest.h ]; then
    # GoogleTest from source, installed next to the build so find_package(GTest) sees it.
    gtest_prefix=$build/_gtest
    if [ ! -e "$gtest_prefix/include/gtest/gtest.h" ]; then
      cmake -S "$deps/googletest" -B "$build/_gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$gtest_prefix" >"$out/gtest-build.log" 2>&1
      cmake --build "$build/_gtest-build" -j "$jobs" >>"$out/gtest-build.log" 2>&1
      cmake --install "$build/_gtest-build" >>"$out/gtest-build.log" 2>&1
    fi
    cmake_args+=(-DCMAKE_PREFIX_PATH="$gtest_prefix")
  fi
fi

# `--impl cudnn` loads cuDNN at run time: where PyTorch's wheel carries the only one, point at it.
if [ -z "${FLASHBENCH_CUDNN_LIBRARY:-}" ] && cudnn_library=$(python3 "$root/scripts/find_cudnn.py" 2>/dev/null); then
  export FLASHBENCH_CUDNN_LIBRARY=$cudnn_library
fi
{ nvidia-smi || true; nvcc --version; echo "FLASHBENCH_CUDNN_LIBRARY=${FLASHBENCH_CUDNN_LIBRARY:-}"; } >"$out/device.txt" 2>&1
echo "== configure"
cmake -S "$root" -B "$build" ${cmake_args[@]+"${cmake_args[@]}"} >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
echo "== build"
cmake --build "$build" -j "$jobs" >"$out/build.log" 2>&1 || { grep -E -A5 "error|FAILED" "$out/build.log" | head -60; exit 1; }
grep -E "spill" "$out/build.log" | sort -u | head -20 || true
# The machine code: HGMMA in every sm_90a kernel and no local memory there (scripts/sass_check.py;
# the table of every kernel in OUT/sass.md). A broken rule or an unreadable dump fails this script;
# no cuobjdump on the machine (exit 3) is only said.
echo "== machine code"
sass_status=0
python3 "$root/scripts/sass_check.py" "$build/flashbench" >"$out/sass.md" || sass_status=$?
if [ "$sass_status" = 3 ]; then sass_status=0; fi
echo "== test"
gpu_gtests='Gpu/*:CudaBackend.*:CudaDevice.*:CudnnDevice.*:Determinism.Cuda*'
gpu_cli_tests='^py\.(grad_backend|cuda_auto|run_json_contract|plugin_cli|peer_protocol)_test$'
set +e
if [ "${TESTS:-all}" = gpu ]; then
  ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 600 -R "$gpu_cli_tests" >"$out/ctest.log" 2>&1
  status=$?
else
  ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 600 >"$out/ctest.log" 2>&1
  status=$?
fi
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | head -40
# The GPU GoogleTests once more in one process, summarised (under TESTS=gpu, the only run of them).
"$build/tests/flashbench_tests" --gtest_filter="$gpu_gtests" --gtest_brief=1 >"$out/gpu-tests.log" 2>&1
gtest_status=$?
set -e
tail -3 "$out/gpu-tests.log"
if [ "${TESTS:-all}" = gpu ] && [ "$status" = 0 ]; then status=$gtest_status; fi
if [ "$status" = 0 ]; then status=$sass_status; fi
exit $status
