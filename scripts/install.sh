#!/usr/bin/env bash
# Installs the built flashbench binary (cmake --install) so that `flashbench ...` works as the README
# writes it: as root to /usr/local/bin, otherwise to ~/.local/bin, with a note when that folder is not
# on PATH. scripts/setup.sh calls it after the build.
# usage: scripts/install.sh [BUILD_DIR]   (default build)
# Environment: FLASHBENCH_PREFIX replaces the prefix (the binary goes to PREFIX/bin).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}
if [[ -n "${FLASHBENCH_PREFIX:-}" ]]; then
  prefix=$FLASHBENCH_PREFIX
elif [[ $(id -u) -eq 0 ]]; then
  prefix=/usr/local
else
  prefix=$HOME/.local
fi
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
echo "setup: installed $prefix/bin/flashbench"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "setup: $prefix/bin is not on PATH; add it to run \`flashbench\` by name:" \
       "export PATH=\"$prefix/bin:\$PATH\" (in ~/.bashrc to keep it)" ;;
esac
