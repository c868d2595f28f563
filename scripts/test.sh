#!/usr/bin/env bash
# Builds flashbench (installing what is missing, as scripts/setup.sh does) and runs the whole test
# suite with CTest. GPU tests skip themselves on a machine without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-run
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)"
