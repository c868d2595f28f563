#!/usr/bin/env bash
# Nsight Compute's reading of one launch of a kernel in a flashbench run: where the warps stall, how
# busy the tensor pipe and the issue slots are, the source-level counters. A kernel change starts
# from here (docs/cuda-design.md, "How to measure"). ncu reads the counters only on machines whose runtime lets it; the
# clocks are left as they are (--clock-control none), so the reading is of the GPU as it runs.
#
#   scripts/gpu-ncu.sh OUTPUT_DIR BUILD_DIR KERNEL_REGEX [flashbench run arguments...]
#
# BUILD_DIR holds flashbench. KERNEL_REGEX matches ncu's name of the kernel, the function's name
# without namespace or template arguments ('backward_kernel', 'forward_kernel': a mangled name
# matches nothing); the run's arguments choose the instance, and the first launch is read. The run
# arguments default to v2 at d = 128, N = 16K, H = 16, bf16, without a mask; the script adds
# --profile (one warm-up, one sample) and --no-check. Environment: NCU (default ncu), NCU_SECTIONS
# (section names separated by spaces or commas; default: SpeedOfLight, ComputeWorkloadAnalysis,
# MemoryWorkloadAnalysis, WarpStateStats, SourceCounters, LaunchStats, Occupancy), NCU_SASS=1 to
# read the launch a second time for its stall samples per SASS instruction.
#
# Writes OUTPUT_DIR/ncu.txt (the report as text) and OUTPUT_DIR/command.txt; with NCU_SASS=1 also
# OUTPUT_DIR/sass.csv (ncu's source page) and OUTPUT_DIR/stalls.md (scripts/ncu_stalls.py: each stall
# reason's share and the instructions that hold it). Exit: 0; 1 ncu or the run failed (ncu.txt or
# sass.csv says why); 2 a usage error; 3 no ncu.
set -euo pipefail
usage="usage: scripts/gpu-ncu.sh OUTPUT_DIR BUILD_DIR KERNEL_REGEX [flashbench run arguments...]"
if [ $# -lt 3 ]; then
  echo "$usage" >&2
  exit 2
fi
out=$1 build=$2 kernel=$3
shift 3
if [ ! -x "$build/flashbench" ]; then
  echo "gpu-ncu.sh: no flashbench in '$build'" >&2
  exit 2
fi
ncu=${NCU:-ncu}
if ! command -v "$ncu" > /dev/null; then
  echo "gpu-ncu.sh: no Nsight Compute ('$ncu' is not on PATH; NCU names another)" >&2
  exit 3
fi
if [ $# -eq 0 ]; then
  set -- --backend cuda --impl v2 --seq 16384 --batch 1 --heads 16 --head-dim 128 --dtype bf16
fi
if ! mkdir -p "$out" 2>/dev/null; then
  echo "gpu-ncu.sh: cannot create the output folder '$out'" >&2
  exit 2
fi
# ncu takes one name a --section: a comma list handed over whole matches no section.
requested=${NCU_SECTIONS:-SpeedOfLight ComputeWorkloadAnalysis MemoryWorkloadAnalysis WarpStateStats \
  SourceCounters LaunchStats Occupancy}
sections=()
for section in ${requested//,/ }; do
  sections+=(--section "$section")
done
# Each reading: ncu with the clocks as they are, the first matching launch of the run.
launch=(-k "regex:$kernel" -c 1 "$build/flashbench" run "$@" --profile --no-check)
# read_launch REPORT [ncu options...]: runs ncu on the launch into REPORT, its command line into
# command.txt; on failure the report's tail and a line naming it (status 1).
: > "$out/command.txt"
read_launch() {
  local report=$1
  shift
  local command=("$ncu" --clock-control none "$@" "${launch[@]}")
  printf '%q ' "${command[@]}" >> "$out/command.txt"
  echo >> "$out/command.txt"
  if ! "${command[@]}" > "$report" 2>&1; then
    tail -5 "$report" >&2
    echo "gpu-ncu.sh: ncu or the run failed ($report)" >&2
    exit 1
  fi
}
read_launch "$out/ncu.txt" "${sections[@]}" --print-details all
if grep -q "No kernels were profiled" "$out/ncu.txt" || ! grep -q "Section:" "$out/ncu.txt"; then
  echo "gpu-ncu.sh: ncu read no kernel matching '$kernel' ($out/ncu.txt)" >&2
  exit 1
fi
if [ "${NCU_SASS:-0}" = 1 ]; then
  read_launch "$out/sass.csv" --section SourceCounters --page source --print-source sass --csv
  if ! python3 "$(dirname "$0")/ncu_stalls.py" "$out/sass.csv" > "$out/stalls.md"; then
    echo "gpu-ncu.sh: no stall samples by instruction in $out/sass.csv" >&2
    exit 1
  fi
  echo "gpu-ncu.sh: $out/stalls.md"
fi
echo "gpu-ncu.sh: $out/ncu.txt"
