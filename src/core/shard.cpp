#include "flashbench/core/shard.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"

namespace flashbench {

namespace {

// A non-negative integer, the whole text, or nothing.
std::optional<int> whole_number(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < 0) return std::nullopt;
  return value;
}

int number_of(std::string_view text, std::string_view what, std::string_view flag_text) {
  const std::optional<int> value = whole_number(text);
  if (!value) throw UsageError(fmt::format("--shard {}: {} '{}' is not a whole number", flag_text, what, text));
  return *value;
}

int environment_number(const EnvironmentLookup& environment, const char* name) {
  const std::string text = environment(name).value_or("");
  const std::optional<int> value = whole_number(text);
  if (!value) throw UsageError(fmt::format("--shard auto: {}='{}' is not a whole number", name, text));
  return *value;
}

Shard checked(Shard shard, std::string_view flag_text) {
  if (shard.count < 1) throw UsageError(fmt::format("--shard {}: the shard count must be at least 1", flag_text));
  if (shard.index >= shard.count)
    throw UsageError(fmt::format("--shard {}: index {} is not below the shard count {} (indices are 0 to {})",
                                 flag_text, shard.index, shard.count, shard.count - 1));
  return shard;
}

}  // namespace

EnvironmentLookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Shard parse_shard(std::string_view text, const EnvironmentLookup& environment) {
  const size_t slash = text.find('/');
  const std::string_view first = text.substr(0, slash);
  const std::optional<std::string_view> count_text =
      slash == std::string_view::npos ? std::nullopt : std::optional(text.substr(slash + 1));
  if (first != "auto") {
    if (!count_text) throw UsageError(fmt::format("--shard '{}': expected I/N (e.g. 0/4), auto or auto/N", text));
    return checked({number_of(first, "index", text), number_of(*count_text, "count", text), "--shard"}, text);
  }

  Shard shard;
  const bool slurm = environment("SLURM_ARRAY_TASK_ID").has_value();
  if (slurm) {
    shard.source = "SLURM_ARRAY_TASK_ID";
  } else if (environment("JOB_COMPLETION_INDEX")) {
    shard.source = "JOB_COMPLETION_INDEX";
  } else {
    throw UsageError(fmt::format("--shard {}: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor "
                                 "JOB_COMPLETION_INDEX (a Kubernetes indexed job) is set; give I/N instead",
                                 text));
  }
  shard.index = environment_number(environment, shard.source.c_str());
  if (count_text) {
    shard.count = number_of(*count_text, "count", text);
  } else if (environment("FLASHBENCH_SHARD_COUNT")) {
    shard.count = environment_number(environment, "FLASHBENCH_SHARD_COUNT");
  } else if (slurm && environment("SLURM_ARRAY_TASK_COUNT")) {
    shard.count = environment_number(environment, "SLURM_ARRAY_TASK_COUNT");
    // A resubmission of some indices (--array=1,3) is an array of 2 whose indices run to 3: its
    // count is not the sweep's, and taking it would deal the sweep differently.
    const int min = environment("SLURM_ARRAY_TASK_MIN") ? environment_number(environment, "SLURM_ARRAY_TASK_MIN") : 0;
    const int max = environment("SLURM_ARRAY_TASK_MAX") ? environment_number(environment, "SLURM_ARRAY_TASK_MAX")
                                                        : shard.count - 1;
    if (min != 0 || max != shard.count - 1)
      throw UsageError(fmt::format("--shard auto: this job array runs {} tasks with indices {} to {}, not 0 to {}: "
                                   "its size is not the sweep's shard count; give it as --shard auto/N or "
                                   "FLASHBENCH_SHARD_COUNT",
                                   shard.count, min, max, shard.count - 1));
  } else {
    throw UsageError(fmt::format("--shard {}: {} is set but not the number of shards: give --shard auto/N or "
                                 "FLASHBENCH_SHARD_COUNT",
                                 text, shard.source));
  }
  return checked(shard, text);
}

std::vector<int> deal_by_cost(std::span<const double> costs, int shards) {
  if (shards < 1) throw UsageError("deal_by_cost: at least one shard");
  std::vector<size_t> order(costs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Costliest first; equal costs in sweep order, so the plan depends on nothing but the costs.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<size_t>(shards), 0.0);
  std::vector<int> plan(costs.size(), 0);
  for (size_t configuration : order) {
    const auto lightest = std::min_element(load.begin(), load.end());  // the first of equals
    plan[configuration] = static_cast<int>(lightest - load.begin());
    *lightest += costs[configuration];
  }
  return plan;
}

std::string stable_hash(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a 64-bit offset basis and prime
  for (const unsigned char byte : text) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  return fmt::format("{:016x}", hash);
}

std::string array_indices(std::vector<int> indices) {
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  std::string text;
  for (size_t start = 0; start < indices.size();) {
    size_t end = start;
    while (end + 1 < indices.size() && indices[end + 1] == indices[end] + 1) ++end;
    if (!text.empty()) text += ',';
    if (end - start >= 2) {
      text += fmt::format("{}-{}", indices[start], indices[end]);
    } else {
      for (size_t i = start; i <= end; ++i) text += fmt::format("{}{}", i == start ? "" : ",", indices[i]);
    }
    start = end + 1;
  }
  return text;
}

}  // namespace flashbench
