#!/usr/bin/env bash
# Installs what only the tests need, beyond scripts/setup.sh's packages: Slurm and munge, with which
# tests/scripts/slurm_test.py starts a single-node cluster (Debian 12 packages; no service is configured or
# enabled by the test, which runs its own daemons in a temporary folder). As root it installs what is
# missing; otherwise it says what is missing, and that test reports itself skipped.
set -euo pipefail

packages=(slurmctld slurmd slurm-client munge)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
((${#missing[@]})) || exit 0
if [[ $(id -u) -eq 0 ]]; then
  echo "test-deps: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "test-deps: ${missing[*]} missing (the Slurm test will be skipped); as root: apt-get install -y ${missing[*]}" >&2
fi
