#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), configures and builds flashbench in Release, then
# runs `flashbench run --seq 4096`. Pass --no-run to stop after the build.
# Environment: BUILD_DIR (default build), FLASHBENCH_CUDA (AUTO|ON|OFF, default AUTO).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ git libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev
          python3 python3-numpy python3-matplotlib)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages; run as root or install them first:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHBENCH_CUDA="${FLASHBENCH_CUDA:-AUTO}" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"

if [[ "${1:-}" != "--no-run" ]]; then
  "$build_dir/flashbench" run --seq 4096
fi
