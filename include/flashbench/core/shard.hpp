#pragma once
// One sweep over several processes (a scheduler's job array, Kubernetes' indexed jobs, GNU parallel):
// which share of the sweep's configurations a process runs, how the configurations are dealt so that
// the shards finish together, and the hash that tells one sweep's shards from another's. The
// scheduler starts, requeues and counts the processes; flashbench only needs to know its share.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashbench {

struct Shard {
  int index = 0;       // 0 .. count-1
  int count = 1;
  std::string source;  // where the index came from: "--shard", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"
};

// The environment as parse_shard reads it (a parameter, so that tests need not set variables).
using EnvironmentLookup = std::function<std::optional<std::string>(const char* name)>;
EnvironmentLookup process_environment();

// `--shard` text: "I/N" (0 ≤ I < N), "auto" (the index from SLURM_ARRAY_TASK_ID, else
// JOB_COMPLETION_INDEX; the count from FLASHBENCH_SHARD_COUNT, else SLURM_ARRAY_TASK_COUNT) or
// "auto/N" (the index from the environment, the count N). A resubmission of some indices
// (--array=1,3) no longer says how many shards the sweep has, so "auto" refuses a Slurm array whose
// indices are not 0..COUNT-1 unless the count is given. Throws UsageError.
Shard parse_shard(std::string_view text, const EnvironmentLookup& environment);

// The shard (0 .. shards-1) of each configuration, dealt by cost: the most expensive first, each to
// the shard with the least cost so far (ties to the lowest index), so that the shards' totals are
// close (within the largest single cost of each other). Deterministic: every process of an array
// computes the same plan on its own.
std::vector<int> deal_by_cost(std::span<const double> costs, int shards);

// A short, stable name of a text: 16 hex digits of its 64-bit FNV-1a hash. The same on every
// machine and build, so shards run on different nodes agree.
std::string stable_hash(std::string_view text);

// "0,2,5-7": indices in the form Slurm's --array takes, ascending, runs of three or more as a range.
std::string array_indices(std::vector<int> indices);

}  // namespace flashbench
