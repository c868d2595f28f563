#!/usr/bin/env bash
# Submits a flashbench sweep to Slurm: a job array of SHARDS tasks, one shard each
# (scripts/slurm/sweep.sbatch), and the merge that runs once every task has ended
# (scripts/slurm/merge.sbatch); prints both job ids.
#
#   SHARDS=8 scripts/slurm/submit.sh OUT_DIR RUN_FLAGS...
#   SHARDS=8 ARRAY=1,5 scripts/slurm/submit.sh OUT_DIR RUN_FLAGS...   # rerun the shards merge named
#
# RUN_FLAGS are `flashbench run`'s sweep flags (--config, --seq, --backend, ...; not --shard, --out
# or --format). Give them unchanged when rerunning shards: they define the sweep, and a shard of
# another sweep is refused by --resume and by the merge. Partition, time limit, GPUs and account come
# from sbatch's own environment (SBATCH_PARTITION, SBATCH_TIMELIMIT, SBATCH_GRES, SBATCH_ACCOUNT:
# `man sbatch`), anything else from SBATCH_FLAGS. FLASHBENCH is the binary the tasks run (default:
# build/flashbench of this checkout). Logs go to OUT_DIR/logs.
set -euo pipefail
out=${1:?usage: SHARDS=N scripts/slurm/submit.sh OUT_DIR RUN_FLAGS...}
shift
shards=${SHARDS:?set SHARDS, the number of tasks of the job array}
here=$(cd "$(dirname "$0")" && pwd)
export FLASHBENCH=${FLASHBENCH:-$(cd "$here/../.." && pwd)/build/flashbench}
export FLASHBENCH_SHARD_COUNT=$shards
array=${ARRAY:-0-$((shards - 1))}
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
# shellcheck disable=SC2086  # SBATCH_FLAGS is a list of options
sweep=$(sbatch --parsable ${SBATCH_FLAGS:-} --array="$array" --output="$out/logs/%x-%A_%a.out" \
  "$here/sweep.sbatch" "$out" "$@")
sweep=${sweep%%;*}  # --parsable prints JOBID[;CLUSTER]
# The merge needs no GPU: sbatch's GPU variables are for the tasks.
# shellcheck disable=SC2086
merge=$(env -u SBATCH_GRES -u SBATCH_GPUS -u SBATCH_GPUS_PER_TASK sbatch --parsable ${SBATCH_FLAGS:-} \
  --dependency=afterany:"$sweep" --output="$out/logs/%x-%j.out" "$here/merge.sbatch" "$out")
echo "sweep $sweep (array $array of $shards shards), merge ${merge%%;*} -> $out/sweep.json"
