#!/usr/bin/env bash
# Copy the headers flashbench needs (fmt, nlohmann/json, CLI11) and GoogleTest's sources into .deps/
# (ignored by git), for building on a GPU machine where nothing can be installed. Run it on a machine
# that has them (Debian: libfmt-dev nlohmann-json3-dev libcli11-dev googletest).
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
du -sh "$deps"
