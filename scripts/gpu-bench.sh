#!/usr/bin/env bash
# The GPU workflow in one invocation: build and test (scripts/gpu-check.sh), then a sweep of all four
# variants over N with B·N tokens fixed, the PyTorch SDPA peers on the same shapes, one merged JSON
# (flashbench's contract, peers' rows beside ours, by `flashbench merge`), its tables (table.md, and
# summary.md: per head dim over N ≥ 2048, scripts/gpu_table.py) and the plots (a folder per mask), all
# under OUTPUT_DIR.
#
#   scripts/gpu-bench.sh OUTPUT_DIR
#
# Environment (defaults are the H200 sweep of issue 6): SEQS="1024 ... 65536", TOKENS=16384 (B = max(1,
# TOKENS/N)), HEADS=16, HEAD_DIMS="128" (a list: one sweep per head dim; HEAD_DIM is the old name of a
# single one), DTYPE=bf16, MASKS="false true", MAX_TIME=3 [s per configuration], IMPLS (a comma list
# of implementations, e.g. "standard,v2,v2.mma,cudnn"; default: every variant's default),
# PEER_BACKENDS (default all four torch SDPA backends), COLD_SEQS (a list of N: the implementations
# run there also with --cold, the L2 flushed before every pass, into rows/cold-*.jsonl, kept out of
# sweep.json, and OUT/table-warm-cold.md sets their medians beside the warm ones; default none),
# EXTRA_HEAD_DIMS (a list of head dims swept at EXTRA_SEQS only, default N = 8192, peers included,
# in the same sweep.json: "96 192 256" beside the full sweeps of HEAD_DIMS="64 128"; default none),
# SKIP_CHECK=1 to reuse an existing build,
# SKIP_PEERS=1, BUILD_DIR (default build-gpu; gpu-check configures only a folder without a CMake
# cache and refuses one configured otherwise: exit 3).
set -euo pipefail
out=${1:?usage: scripts/gpu-bench.sh OUTPUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
seqs=${SEQS:-"1024 2048 4096 8192 16384 32768 65536"}
tokens=${TOKENS:-16384}
heads=${HEADS:-16}
head_dims=${HEAD_DIMS:-${HEAD_DIM:-128}}
if [ -n "${IMPLS:-}" ]; then selection=(--impl "$IMPLS"); else selection=(--variant all); fi
peer_backends=${PEER_BACKENDS:-math,flash,efficient,cudnn}
dtype=${DTYPE:-bf16}
masks=${MASKS:-"false true"}
extra_head_dims=${EXTRA_HEAD_DIMS:-}
extra_seqs=${EXTRA_SEQS:-8192}
max_time=${MAX_TIME:-3}
# One stopping rule for flashbench's rows and the peers' (timing.py follows flashbench's rule).
sampling=(--warmup 2 --min-samples 5 --max-time "$max_time")
case "$masks" in  # torch_sdpa.py takes both masks as "both"
  "false true" | "true false") peer_mask=both ;;
  *) peer_mask=$masks ;;
esac
mkdir -p "$out/rows"

if [ "${SKIP_CHECK:-0}" != 1 ]; then
  check=0
  "$root/scripts/gpu-check.sh" "$out/check" "$build" || check=$?
  if [ "$check" = 3 ]; then
    exit 3  # BUILD_DIR is configured otherwise: gpu-check said so and changed nothing
  elif [ "$check" != 0 ]; then
    echo "gpu-check reported failures (see $out/check)"
  fi
fi
flashbench=$build/flashbench
# `--impl cudnn` loads cuDNN at run time; where PyTorch's wheel carries the only one, point at it.
if [ -z "${FLASHBENCH_CUDNN_LIBRARY:-}" ] && cudnn_library=$(python3 "$root/scripts/find_cudnn.py" 2>/dev/null); then
  export FLASHBENCH_CUDNN_LIBRARY=$cudnn_library
fi

# One configuration of the sweep into rows/PREFIX-d..-n..-causal-...jsonl: run_rows PREFIX N [flags...]
# (head_dim and causal: those of sweep_head_dim, the caller).
run_rows() {
  local prefix=$1 n=$2
  shift 2
  local batch=$(( tokens / n > 0 ? tokens / n : 1 ))
  "$flashbench" run --backend cuda "${selection[@]}" --dtype "$dtype" --seq "$n" --batch "$batch" \
    --heads "$heads" --head-dim "$head_dim" --mask "$causal" "${sampling[@]}" \
    --format jsonl --out "$out/rows/$prefix-d$head_dim-n$n-causal-$causal.jsonl" "$@" ||
    echo "$prefix run d=$head_dim N=$n causal=$causal exited $?"
}

# One head dim's sweep: sweep_head_dim D "N..." "COLD N..." (flashbench's rows, then the peers').
sweep_head_dim() {
  local head_dim=$1 seqs_here=$2 cold_seqs=$3 causal n
  echo "== sweep: N in {$seqs_here}, B·N = $tokens, H = $heads, d = $head_dim, $dtype, ${selection[*]}"
  for causal in $masks; do
    for n in $seqs_here; do run_rows cuda "$n"; done
    for n in $cold_seqs; do run_rows cold "$n" --cold; done
  done

  if [ "${SKIP_PEERS:-0}" != 1 ]; then
    echo "== peers: torch SDPA, d = $head_dim"
    python3 "$root/scripts/peers/torch_sdpa.py" --out "$out/rows/peers-torch-sdpa-d$head_dim.json" \
      --seq "${seqs_here// /,}" --tokens "$tokens" --heads "$heads" --head-dim "$head_dim" --dtype "$dtype" \
      "${sampling[@]}" --backends "$peer_backends" --mask "$peer_mask" | tee -a "$out/peers.log" || true
  fi
}
for head_dim in $head_dims; do sweep_head_dim "$head_dim" "$seqs" "${COLD_SEQS:-}"; done
for head_dim in $extra_head_dims; do sweep_head_dim "$head_dim" "$extra_seqs" ""; done

echo "== merge"
# flashbench merge: the rows files of the runs over N (one whole sweep each), then the peers' (their
# rows as written, their meta in meta.peers). It refuses inputs whose schema_version differ or that
# hold a row twice, and exits 1 (the file written) when a run was stopped before its end.
shopt -s nullglob
row_files=("$out"/rows/cuda-*.jsonl)
peer_args=()
for peer in "$out"/rows/peers-*.json; do
  peer_args+=(--peer "$peer")
done
shopt -u nullglob
"$flashbench" merge ${row_files[@]+"${row_files[@]}"} ${peer_args[@]+"${peer_args[@]}"} --out "$out/sweep.json" ||
  echo "merge exited $?"

# The milestone table (every shape: v2 beside the peers) and its summary per head dim over N ≥ 2048
# (the ranges of the ratios to FA2 and cuDNN, the rates and the peak), as Markdown.
# Written whole or not at all: each table goes to a temporary file first.
write_table() {  # write_table FILE [gpu_table.py options]
  local file=$1
  shift
  if python3 "$root/scripts/gpu_table.py" "$out/sweep.json" "$@" > "$file.part"; then
    mv "$file.part" "$file"
  else
    echo "gpu_table.py $* exited with an error: no $file"
    rm -f "$file.part"
  fi
}
if [ -s "$out/sweep.json" ]; then
  echo "== tables"
  write_table "$out/table.md"
  write_table "$out/summary.md" --summary --min-n 2048
fi

if [ -n "${COLD_SEQS:-}" ]; then
  echo "== warm against --cold"
  python3 "$root/scripts/gpu_table.py" --warm-cold "$out"/rows/cuda-*.jsonl "$out"/rows/cold-*.jsonl \
    > "$out/table-warm-cold.md" || echo "gpu_table.py --warm-cold exited $?"
fi

# One folder of figures per mask (plots/no-mask, plots/causal), so a figure's lines share one mask.
if [ -f "$root/scripts/plot.py" ]; then
  echo "== plots"
  for mask in $masks; do
    folder=$([ "$mask" = true ] && echo causal || echo no-mask)
    python3 "$root/scripts/plot.py" "$out/sweep.json" --where "causal=$mask" --out "$out/plots/$folder" ||
      echo "plot.py failed ($folder)"
  done
fi
