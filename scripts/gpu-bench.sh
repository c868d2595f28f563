#!/usr/bin/env bash
# The GPU workflow in one invocation: build and test (scripts/gpu-check.sh), then a sweep of all four
# variants over N with B·N tokens fixed, the PyTorch SDPA peers on the same shapes, one merged JSON
# (flashbench's contract, peers' rows beside ours) and the plots, all under OUTPUT_DIR.
#
#   scripts/gpu-bench.sh OUTPUT_DIR
#
# Environment (defaults are the H200 sweep of issue 6): SEQS="1024 ... 65536", TOKENS=16384 (B = max(1,
# TOKENS/N)), HEADS=16, HEAD_DIM=128, DTYPE=bf16, MASKS="false true", MAX_TIME=3 [s per configuration],
# SKIP_CHECK=1 to reuse an existing build, SKIP_PEERS=1, BUILD_DIR.
set -euo pipefail
out=${1:?usage: scripts/gpu-bench.sh OUTPUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
seqs=${SEQS:-"1024 2048 4096 8192 16384 32768 65536"}
tokens=${TOKENS:-16384}
heads=${HEADS:-16}
head_dim=${HEAD_DIM:-128}
dtype=${DTYPE:-bf16}
masks=${MASKS:-"false true"}
max_time=${MAX_TIME:-3}
mkdir -p "$out/rows"

if [ "${SKIP_CHECK:-0}" != 1 ]; then
  "$root/scripts/gpu-check.sh" "$out/check" "$build" || echo "gpu-check reported failures (see $out/check)"
fi
flashbench=$build/flashbench

echo "== sweep: N in {$seqs}, B·N = $tokens, H = $heads, d = $head_dim, $dtype"
for causal in $masks; do
  for n in $seqs; do
    batch=$(( tokens / n > 0 ? tokens / n : 1 ))
    "$flashbench" run --backend cuda --variant all --dtype "$dtype" --seq "$n" --batch "$batch" --heads "$heads" \
      --head-dim "$head_dim" --mask "$causal" --warmup 2 --min-samples 5 --max-time "$max_time" \
      --format jsonl --out "$out/rows/cuda-n$n-causal-$causal.jsonl" || echo "run N=$n causal=$causal exited $?"
  done
done

if [ "${SKIP_PEERS:-0}" != 1 ]; then
  echo "== peers: torch SDPA"
  python3 "$root/scripts/peers/torch_sdpa.py" --out "$out/rows/peers-torch-sdpa.json" --seq "${seqs// /,}" \
    --tokens "$tokens" --heads "$heads" --head-dim "$head_dim" --dtype "$dtype" --max-time "$max_time" \
    --mask "$( [ "$masks" = "false true" ] && echo both || echo "$masks" )" | tee "$out/peers.log" || true
fi

echo "== merge"
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
meta, rows = None, []
for path in sorted(glob.glob(os.path.join(out, "rows", "cuda-*.jsonl"))):
    with open(path) as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    if not lines:
        continue
    if meta is None and "meta" in lines[0]:
        meta = lines[0]["meta"]
    rows += [r for r in lines if "backend" in r]
for path in sorted(glob.glob(os.path.join(out, "rows", "peers-*.json"))):
    with open(path) as fh:
        peer = json.load(fh)
    rows += peer["rows"]
    (meta or {}).setdefault("peers", []).append(peer["meta"])
with open(os.path.join(out, "sweep.json"), "w") as fh:
    json.dump({"schema_version": 1, "meta": meta or {}, "rows": rows}, fh, indent=1)
print(f"{len(rows)} rows -> {os.path.join(out, 'sweep.json')}")
def ms(r, phase):
    t = (r.get("timing") or {}).get(phase) or {}
    return f"{t['median_ms']:9.2f}" if t.get("median_ms") is not None else "        -"
def gib(r, key):
    m = (r.get("memory") or {}).get("measured") or {}
    return f"{m[key] / 2**30:8.2f}" if m.get(key) is not None else "       -"
print(f"{'backend':20s} {'variant':10s} {'N':>6s} {'B':>3s} c {'fwd ms':>9s} {'bwd ms':>9s} {'bwdTF':>6s} {'peakGiB':>8s} {'model':>8s} {'err':>8s} status")
for r in sorted(rows, key=lambda r: (r["problem"]["causal"], r["problem"]["seq"], r["backend"], r["variant"])):
    p = r["problem"]
    tf = (r.get("throughput") or {}).get("bwd_tflops")
    model = ((r.get("memory") or {}).get("model") or {}).get("peak_bytes")
    err = (r.get("check") or {}).get("max_rel_err")
    print(f"{r['backend']:20s} {r['variant']:10s} {p['seq']:6d} {p['batch']:3d} {int(p['causal'])} {ms(r,'fwd')} {ms(r,'bwd')} "
          f"{tf if tf is None else round(tf, 1)!s:>6s} {gib(r,'peak_bytes')} "
          f"{(f'{model / 2**30:8.2f}' if model else '       -')} {(f'{err:8.1e}' if err is not None else '       -')} {r['status']}")
PY

if [ -f "$root/scripts/plot.py" ]; then
  echo "== plots"
  python3 "$root/scripts/plot.py" "$out/sweep.json" --out "$out/plots" || echo "plot.py failed"
fi
