#!/usr/bin/env bash
# Builds flashbench (installing what is missing, as scripts/setup.sh does), installs what only the
# tests need (scripts/test-deps.sh: Slurm and munge) and runs the whole test suite with CTest. GPU
# tests skip themselves on a machine without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-run
scripts/test-deps.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)"
