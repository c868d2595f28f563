#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), configures and builds flashbench in Release,
# installs the binary on the PATH (scripts/install.sh), then runs `flashbench run --seq 4096`. Pass
# --no-run to stop after the install.
# Environment: BUILD_DIR (default build), FLASHBENCH_CUDA (AUTO|ON|OFF, default AUTO: CUDA only
# where nvcc is found and a GPU is visible), FLASHBENCH_WARNINGS_AS_ERRORS (ON in CI, default OFF),
# FLASHBENCH_PREFIX (where to install; default /usr/local as root, ~/.local otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-packages.sh cmake ninja-build g++ git libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev \
  libopenblas-dev python3 python3-numpy python3-matplotlib

build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHBENCH_CUDA="${FLASHBENCH_CUDA:-AUTO}" \
  -DFLASHBENCH_WARNINGS_AS_ERRORS="${FLASHBENCH_WARNINGS_AS_ERRORS:-OFF}" | sed -n 's/^-- flashbench: /setup: /p'
cmake --build "$build_dir" -j"$(nproc)"
scripts/install.sh "$build_dir"

if [[ "${1:-}" != "--no-run" ]]; then
  "$build_dir/flashbench" run --seq 4096
fi
