#!/usr/bin/env bash
# The CPU benchmark in one invocation: this machine's fp32 FMA and sgemm ceilings (`flashbench info
# --peak`, before and after), all four variants on a sweep of shapes (`flashbench run`), PyTorch's
# standard attention with autograd on the same shapes and thread count (scripts/peers/torch_cpu.py),
# then one table: per variant (its implementation, where rows name one) and shape, forward and backward GFLOP/s (FlashAttention convention),
# % of the measured sgemm peak, and the time ratio against the PyTorch peer (peer time / our time:
# above 1 means flashbench is faster), printed by scripts/cpu_table.py from the rows' own throughput.
# Everything lands in OUTPUT_DIR (JSON files and table.txt).
#
#   scripts/cpu-bench.sh [OUTPUT_DIR]   (default: ../flashbench-results/cpu-bench-DATE beside the
#                                        checkout: measurements live outside the tree, results/README.md)
#
# Environment: SEQS="2048 4096", HEAD_DIMS="64 128", MASKS="false true", HEADS=8, BATCH=1,
# THREADS (default: all cores), MAX_TIME=5 [s of samples per configuration and variant],
# SCALING_THREADS (default "1 THREADS"; "none" skips the scaling runs), BUILD_DIR (default: build-bench,
# the benchmark's own; a folder that already has a CMake cache is built with the options it has),
# CAUSAL_ROUNDS=5 back-to-back causal/non-causal v2 pairs per shape (0 skips), CAUSAL_TIME=1 [s],
# SKIP_BUILD=1 to use an existing build, BUILD_ONLY=1 to stop after the build (prints the binary's
# path), SKIP_PEER=1, PEAK_SIZE=2048,
# PYTHON (default: the system's /usr/bin/python3, where Debian's python3-torch lives).
# The sgemm peak used for "% of peak" is the higher of flashbench's gemm and OpenBLAS's sgemm
# (when the build found OpenBLAS), taking the highest of three measurements (before the sweep,
# between flashbench and the peer, after), so a machine that got busier during the run does not
# flatter the percentages; the load average at each is printed with the table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$(dirname "$root")/flashbench-results/cpu-bench-$(date -u +%Y%m%dT%H%M%SZ)}
build=${BUILD_DIR:-$root/build-bench}
seqs=${SEQS:-"2048 4096"}
head_dims=${HEAD_DIMS:-"64 128"}
masks=${MASKS:-"false true"}
heads=${HEADS:-8}
batch=${BATCH:-1}
threads=${THREADS:-$(nproc)}
max_time=${MAX_TIME:-5}
peak_size=${PEAK_SIZE:-2048}
python=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3 )}
comma() { echo "$1" | tr ' ' ','; }
mask_arg=$( [ "$masks" = "false true" ] || [ "$masks" = "true false" ] && echo both || echo "$masks" )

# The benchmark's own build folder is configured (Release, no tests) only when it has no CMake cache
# yet. A folder configured before, by this script or otherwise (scripts/setup.sh's build/, say),
# keeps its options: it is reconfigured with none and built, so no other script's build changes.
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if [ -e "$build/CMakeCache.txt" ]; then
    build_type=$(sed -n '/^CMAKE_BUILD_TYPE:[A-Za-z]*=/{s/^[^=]*=//p;q}' "$build/CMakeCache.txt")
    if [ "$build_type" != Release ]; then
      echo "cpu-bench: $build is configured as '${build_type:-no build type}', not Release: its figures will be low" >&2
    fi
    cmake -S "$root" -B "$build" >/dev/null
  else
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHBENCH_BUILD_TESTS=OFF >/dev/null
  fi
  cmake --build "$build" --target flashbench
fi
flashbench=$build/flashbench
if [ "${BUILD_ONLY:-0}" = 1 ]; then
  echo "$flashbench"
  exit 0
fi
mkdir -p "$out"
# OpenBLAS 0.3.21 does not recognise every newer CPU (AVX-512 Xeons, Zen 4/5) and may fall back to
# older kernels: name the family by what this CPU offers. SkylakeX's kernels need AVX-512 (on an
# AVX2-only EPYC they die with SIGILL); Zen's and Haswell's need AVX2.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then
    OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then
    if grep -qw AuthenticAMD /proc/cpuinfo; then OPENBLAS_CORETYPE=Zen; else OPENBLAS_CORETYPE=Haswell; fi
  else
    OPENBLAS_CORETYPE=Prescott
  fi
fi
export OPENBLAS_CORETYPE

echo "== peak before ($threads threads)"
cut -d' ' -f1 /proc/loadavg > "$out/load-before.txt" 2>/dev/null || true
"$flashbench" info --peak --threads "$threads" --peak-size "$peak_size" --format json > "$out/peak-before.json"
echo "== flashbench: N in {$seqs}, d in {$head_dims}, causal $mask_arg, B=$batch H=$heads"
"$flashbench" run --variant all --seq "$(comma "$seqs")" --head-dim "$(comma "$head_dims")" --mask "$mask_arg" \
  --heads "$heads" --batch "$batch" --threads "$threads" --min-samples 5 --max-time "$max_time" \
  --format json --out "$out/flashbench.json"
echo "== peak between"
"$flashbench" info --peak --threads "$threads" --peak-size "$peak_size" --format json > "$out/peak-between.json"
cut -d' ' -f1 /proc/loadavg > "$out/load-between.txt" 2>/dev/null || true
if [ "${SKIP_PEER:-0}" != 1 ]; then
  echo "== peer: PyTorch standard attention with autograd"
  "$python" "$root/scripts/peers/torch_cpu.py" "$out/torch-cpu.json" --seq "$(comma "$seqs")" \
    --head-dim "$(comma "$head_dims")" --mask "$mask_arg" --heads "$heads" --batch "$batch" \
    --threads "$threads" --max-time "$max_time"
fi
# Thread scaling: v2 and standard on the first shape, once per thread count, same sampling rule.
scaling=${SCALING_THREADS:-"1 $threads"}
first_seq=${seqs%% *}
first_d=${head_dims%% *}
rm -f "$out"/scaling-t*.json
if [ "$scaling" != "none" ]; then
  for t in $scaling; do
    echo "== scaling: $t threads, N=$first_seq d=$first_d"
    "$flashbench" run --variant standard,v2 --seq "$first_seq" --head-dim "$first_d" --heads "$heads" \
      --batch "$batch" --threads "$t" --min-samples 5 --max-time "$max_time" --no-check \
      --format json --out "$out/scaling-t$t.json"
  done
fi
# Causal against non-causal v2, per useful FLOP: the pair runs back to back (one `run --mask both`),
# CAUSAL_ROUNDS times per shape, and the table reports the median and range of the per-pair ratios,
# so that a drift of the machine's speed between the two halves of a long sweep does not decide it.
causal_rounds=${CAUSAL_ROUNDS:-5}
rm -f "$out"/causal-*.json
if [ "$causal_rounds" -gt 0 ]; then
  echo "== causal efficiency: v2, $causal_rounds back-to-back pairs per shape"
  for round in $(seq "$causal_rounds"); do
    for s in $seqs; do
      for d in $head_dims; do
        "$flashbench" run --variant v2 --seq "$s" --head-dim "$d" --mask both --heads "$heads" --batch "$batch" \
          --threads "$threads" --min-samples 5 --max-time "${CAUSAL_TIME:-1}" --no-check \
          --format json --out "$out/causal-n$s-d$d-r$round.json"
      done
    done
  done
fi
echo "== peak after"
"$flashbench" info --peak --threads "$threads" --peak-size "$peak_size" --format json > "$out/peak-after.json"
cut -d' ' -f1 /proc/loadavg > "$out/load-after.txt" 2>/dev/null || true

"$python" "$root/scripts/cpu_table.py" "$out" | tee "$out/table.txt"
