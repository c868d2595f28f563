#!/usr/bin/env bash
# Copy the headers flashbench needs (fmt, nlohmann/json, CLI11) and GoogleTest's sources into .deps/
# (ignored by git), for building on a GPU machine where nothing can be installed. Run it on a machine
# that has them (Debian: libfmt-dev nlohmann-json3-dev libcli11-dev googletest). Where the CUDA
# toolkit there carries cuDNN 9's headers, they go to .deps/include/cudnn/ too: `--impl cudnn` is
# built against them (the library itself is loaded at run time, e.g. from PyTorch's wheel).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/.deps
mkdir -p "$deps/include"
for header_dir in fmt nlohmann CLI; do
  [ -d "/usr/include/$header_dir" ] || { echo "missing /usr/include/$header_dir" >&2; exit 1; }
  rm -rf "$deps/include/$header_dir"
  cp -r "/usr/include/$header_dir" "$deps/include/"
done
[ -d /usr/src/googletest ] || { echo "missing /usr/src/googletest" >&2; exit 1; }
rm -rf "$deps/googletest"
cp -r /usr/src/googletest "$deps/googletest"
cudnn_headers=${CUDA_HOME:-/usr/local/cuda}/include
if [ -e "$cudnn_headers/cudnn_backend.h" ]; then
  rm -rf "$deps/include/cudnn"
  mkdir -p "$deps/include/cudnn"
  cp "$cudnn_headers"/cudnn*.h "$deps/include/cudnn/"
fi
du -sh "$deps"
