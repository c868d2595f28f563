#!/usr/bin/env bash
# Installs the Debian 12 packages named as arguments that are not installed yet (apt, as root); not
# root, it prints the apt-get line to run and fails. scripts/setup.sh, sanitize.sh and fuzz.sh call it.
set -euo pipefail
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
((${#missing[@]})) || exit 0
if [[ $(id -u) -eq 0 ]]; then
  echo "setup: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "setup: missing packages; run as root or install them first:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
