#!/usr/bin/env bash
# Compiler launcher of the sm_90a (wgmma) kernels: runs the compile command it is given, passes its
# output through, and fails the compile when ptxas reports that it serialized a kernel's wgmma
# products ("Potential Performance Loss: wgmma.mma_async instructions are serialized", under codes
# such as C7511 for want of registers). ptxas prints that as an info line and succeeds, and -Werror
# does not catch it, yet it costs a kernel much of its speed: every product then waits for the one
# before it (docs/journal/w12.md and w13.md).
#
#   scripts/ptxas-guard.sh COMMAND [ARGS...]     (CMake: CUDA_COMPILER_LAUNCHER; FLASHBENCH_PTXAS_GUARD)
#
# Exit: the command's status when it fails; 1 when it succeeds but ptxas serialized products; else 0.
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: scripts/ptxas-guard.sh COMMAND [ARGS...]" >&2
  exit 2
fi
out="" err=""
trap 'rm -f "$out" "$err"' EXIT
out=$(mktemp) && err=$(mktemp) || { echo "ptxas-guard.sh: cannot create temporary files" >&2; exit 1; }
"$@" > "$out" 2> "$err"
status=$?
cat "$out"
cat "$err" >&2
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
serialized="ptxas.*Potential Performance Loss: wgmma.mma_async instructions are serialized"
if lines=$(grep -h "$serialized" "$out" "$err"); then
  codes=$(grep -o "(C[0-9]*)" <<< "$lines" | sort -u | paste -sd' ')
  kernels=$(grep -o "function '[^']*'" <<< "$lines" | cut -d"'" -f2 | sort -u)
  if command -v c++filt > /dev/null; then kernels=$(c++filt -p <<< "$kernels"); fi
  kernels=$(paste -sd';' <<< "$kernels" | sed 's/;/; /g')
  echo "error: ptxas serialized the wgmma products ${codes:+$codes }of ${kernels:-a kernel}: restructure the" \
       "kernel (register pressure around its products), or configure with -DFLASHBENCH_PTXAS_GUARD=OFF to build anyway" >&2
  exit 1
fi
exit 0
