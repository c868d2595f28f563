#!/usr/bin/env bash
# The CPU benchmark in one invocation: this machine's fp32 FMA and sgemm ceilings (`flashbench info
# --peak`, before and after), all four variants on a sweep of shapes (`flashbench run`), PyTorch's
# standard attention with autograd on the same shapes and thread count (scripts/peers/torch_cpu.py),
# then one table: per variant and shape, forward and backward GFLOP/s (FlashAttention convention),
# % of the measured sgemm peak, and the time ratio against the PyTorch peer (peer time / our time:
# above 1 means flashbench is faster). Everything lands in OUTPUT_DIR (JSON files and table.txt).
#
#   scripts/cpu-bench.sh [OUTPUT_DIR]        (default: results/cpu-bench)
#
# Environment: SEQS="2048 4096", HEAD_DIMS="64 128", MASKS="false true", HEADS=8, BATCH=1,
# THREADS (default: all cores), MAX_TIME=5 [s of samples per configuration and variant],
# SCALING_THREADS (default "1 THREADS"; "none" skips the scaling runs), BUILD_DIR (default: build),
# CAUSAL_ROUNDS=5 back-to-back causal/non-causal v2 pairs per shape (0 skips), CAUSAL_TIME=1 [s],
# SKIP_BUILD=1 to use an existing build, SKIP_PEER=1, PEAK_SIZE=2048,
# PYTHON (default: the system's /usr/bin/python3, where Debian's python3-torch lives).
# The sgemm peak used for "% of peak" is the higher of flashbench's gemm and OpenBLAS's sgemm
# (when the build found OpenBLAS), taking the highest of three measurements (before the sweep,
# between flashbench and the peer, after), so a machine that got busier during the run does not
# flatter the percentages; the load average at each is printed with the table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/results/cpu-bench}
build=${BUILD_DIR:-$root/build}
seqs=${SEQS:-"2048 4096"}
head_dims=${HEAD_DIMS:-"64 128"}
masks=${MASKS:-"false true"}
heads=${HEADS:-8}
batch=${BATCH:-1}
threads=${THREADS:-$(nproc)}
max_time=${MAX_TIME:-5}
peak_size=${PEAK_SIZE:-2048}
python=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3 )}
mkdir -p "$out"
comma() { echo "$1" | tr ' ' ','; }
mask_arg=$( [ "$masks" = "false true" ] || [ "$masks" = "true false" ] && echo both || echo "$masks" )

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHBENCH_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" --target flashbench
fi
flashbench=$build/flashbench
# OpenBLAS 0.3.21 does not recognise every AVX-512 Xeon; without this it may fall back to SSE kernels.
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}

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

"$python" - "$out" <<'PY' | tee "$out/table.txt"
import json, os, sys
out = sys.argv[1]
peaks = [json.load(open(os.path.join(out, f)))["peak"] for f in ("peak-before.json", "peak-between.json", "peak-after.json")]
loads = []
for phase in ("before", "between", "after"):
    try:
        loads.append(open(os.path.join(out, f"load-{phase}.txt")).read().strip())
    except OSError:
        loads.append("?")
def sgemm(p):
    return max(p["sgemm_gflops"], p["openblas_sgemm_gflops"] or 0.0)
peak = max(sgemm(p) for p in peaks)
fma = max(p["fma_gflops"] for p in peaks)
ours = json.load(open(os.path.join(out, "flashbench.json")))["rows"]
peer_path = os.path.join(out, "torch-cpu.json")
peer = json.load(open(peer_path))["rows"] if os.path.exists(peer_path) else []

def key(row):
    p = row["problem"]
    return (p["batch"], p["heads"], p["seq"], p["head_dim"], p["causal"])

def gflops(row, phase):
    p = row["problem"]
    flop = 4.0 * p["batch"] * p["heads"] * p["seq"] ** 2 * p["head_dim"] * (0.5 if p["causal"] else 1.0)
    flop *= 2.5 if phase == "bwd" else 1.0
    return flop / (row["timing"][phase]["median_ms"] * 1e6)

peer_by_key = {key(r): r for r in peer if r.get("status") == "ok"}
t = peaks[0]["threads"]
print(f"CPU, {t} threads; 1-minute load average before/between/after the sweep: {' / '.join(loads)}"
      f" (before: other work only; between and after include this run's own {t} threads. Above 0 before,"
      f" or above {t} later, other work shared the cores: every figure below is then a lower bound).")
print(f"Ceilings (median of repetitions, highest of the three measurements around the sweep): "
      f"FMA {fma:.0f} GFLOP/s; sgemm {peak:.0f} GFLOP/s "
      f"(flashbench gemm {max(p['sgemm_gflops'] for p in peaks):.0f}, OpenBLAS "
      + (f"{max(p['openblas_sgemm_gflops'] or 0 for p in peaks):.0f} [{peaks[0]['openblas_core']}]" if peaks[0]["openblas_sgemm_gflops"] else "not built in")
      + f", {peaks[0]['sgemm_size']}^3).")
print("GFLOP/s by the FlashAttention convention (fwd 4·B·H·N²·d, bwd 2.5×, halved when causal), medians;"
      " %pk = % of the sgemm ceiling; vs torch = PyTorch time / flashbench time (>1: flashbench faster).")
header = f"{'variant':<11}{'N':>6}{'d':>5}{'causal':>7} | {'fwd GF/s':>9}{'%pk':>5}{'vs torch':>9} | {'bwd GF/s':>9}{'%pk':>5}{'vs torch':>9} | {'bwd/fwd':>7}"
print(header)
print("-" * len(header))
rows = sorted([r for r in ours if r.get("status") == "ok"] + list(peer_by_key.values()),
              key=lambda r: (r["problem"]["causal"], r["problem"]["head_dim"], r["problem"]["seq"],
                             r["backend"] != "cpu", ["standard", "v1", "v2", "checkpoint"].index(r["variant"])))
for r in rows:
    p = r["problem"]
    name = r["variant"] if r["backend"] == "cpu" else "torch"
    cells = []
    for phase in ("fwd", "bwd"):
        g = gflops(r, phase)
        ref = peer_by_key.get(key(r))
        ratio = (ref["timing"][phase]["median_ms"] / r["timing"][phase]["median_ms"]) if ref and r["backend"] == "cpu" else None
        cells.append(f"{g:>9.1f}{100 * g / peak:>5.0f}{(f'{ratio:.2f}x' if ratio else '-'):>9}")
    bwd_over_fwd = r["timing"]["bwd"]["median_ms"] / r["timing"]["fwd"]["median_ms"]
    print(f"{name:<11}{p['seq']:>6}{p['head_dim']:>5}{str(p['causal']).lower():>7} | {cells[0]} | {cells[1]} | {bwd_over_fwd:>7.2f}")
for r in ours:
    if r.get("status") != "ok":
        print(f"{r['variant']} {r['problem']}: {r['status']} {r.get('reason', '')}")

products = peaks[0].get("products", [])
if products:
    print()
    print("The kernels' matrix products (N=2048, d=64), 1 thread, GFLOP/s: flashbench gemm / OpenBLAS sgemm")
    for p in products:
        blas = p["openblas_gflops_1thread"]
        print(f"  {p['name']:<36} {p['ops']} {p['M']:>4}x{p['N']}x{p['K']:<5} {p['gflops_1thread']:6.1f}"
              + (f" / {blas:6.1f} = {p['gflops_1thread'] / blas:.2f}" if blas else ""))

import glob, re, statistics
pairs = {}
for path in glob.glob(os.path.join(out, "causal-*.json")):
    timing = {}
    for r in json.load(open(path))["rows"]:
        if r.get("status") == "ok":
            timing[r["problem"]["causal"]] = r
    if True in timing and False in timing:
        p = timing[True]["problem"]
        for phase in ("fwd", "bwd"):
            ratio = gflops(timing[True], phase) / gflops(timing[False], phase)
            pairs.setdefault((p["seq"], p["head_dim"], phase), []).append(ratio)
if pairs:
    print()
    print("v2 causal / non-causal GFLOP/s per useful FLOP (causal counts half the FLOPs), back-to-back pairs:"
          " median [min, max] over rounds; target >= 1")
    for (seq, d, phase), ratios in sorted(pairs.items()):
        print(f"  N={seq:<6} d={d:<4} {phase}: {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]"
              f" over {len(ratios)} pairs")

scaling = {}
for path in glob.glob(os.path.join(out, "scaling-t*.json")):
    threads = int(re.search(r"scaling-t(\d+)\.json$", path).group(1))
    for r in json.load(open(path))["rows"]:
        if r.get("status") == "ok":
            scaling[(r["variant"], threads)] = r
if scaling:
    counts = sorted({t for _, t in scaling})
    some = next(iter(scaling.values()))["problem"]
    print()
    print(f"Thread scaling (N={some['seq']} d={some['head_dim']}, B={some['batch']} H={some['heads']}): GFLOP/s and"
          " parallel efficiency = speed-up / threads, against 1 thread")
    for variant in ("standard", "v2"):
        for phase in ("fwd", "bwd"):
            base = scaling.get((variant, 1))
            cells = []
            for t in counts:
                r = scaling.get((variant, t))
                if not r:
                    continue
                g = gflops(r, phase)
                eff = f" ({100 * g / gflops(base, phase) / t:.0f}%)" if base else ""
                cells.append(f"{t}T {g:.0f}{eff}")
            print(f"  {variant:<9}{phase}: " + ", ".join(cells))
PY
