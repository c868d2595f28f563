// meta.sweep: the resolved sweep a run belongs to, its plan of shards and its hash; and which of a
// sweep's configurations a set of rows holds whole.
#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/json_integer.hpp"
#include "flashbench/report/sweep_results.hpp"

namespace flashbench {

namespace {

using ordered_json = nlohmann::ordered_json;

// The hash covers everything that makes two runs' rows belong together: the same configurations,
// implementations and settings. Not the plan: a whole run and the shards of the same sweep share it.
std::string hash_of(const SweepRecord& record) {
  const ordered_json identity{
      {"spec", record.spec}, {"settings", record.settings}, {"implementations", record.implementations}};
  return stable_hash(identity.dump());
}

}  // namespace

std::vector<Problem> SweepRecord::configurations() const { return expand(parse_sweep_json(spec.dump(), "meta.sweep.spec")); }

SweepRecord make_sweep_record(const SweepSpec& spec, ordered_json settings, std::vector<std::string> implementations,
                              const std::vector<double>& costs, Shard shard) {
  SweepRecord record;
  record.spec = sweep_to_json(spec);
  record.settings = std::move(settings);
  record.implementations = std::move(implementations);
  record.plan = deal_by_cost(costs, shard.count);
  record.shard = std::move(shard);
  record.hash = hash_of(record);
  return record;
}

ordered_json to_json(const SweepRecord& record) {
  ordered_json j;
  j["hash"] = record.hash;
  j["shard"] = {{"index", record.shard.index}, {"count", record.shard.count}, {"from", record.shard.source}};
  j["configurations"] = record.plan.size();
  j["spec"] = record.spec;
  j["settings"] = record.settings;
  j["implementations"] = record.implementations;
  j["plan"] = record.plan;
  return j;
}

std::optional<SweepRecord> sweep_record_of(const nlohmann::ordered_json& meta, std::string_view source) {
  if (!meta.is_object() || !meta.contains("sweep")) return std::nullopt;
  const ordered_json& j = meta.at("sweep");
  SweepRecord record;
  try {
    record.hash = j.at("hash").get<std::string>();
    record.spec = j.at("spec");
    record.settings = j.at("settings");
    record.implementations = j.at("implementations").get<std::vector<std::string>>();
    const ordered_json& plan = j.at("plan");
    if (!plan.is_array()) throw UsageError(fmt::format("'{}': meta.sweep.plan is not a list", source));
    for (const ordered_json& shard_of : plan)
      record.plan.push_back(json_integer<int>(shard_of, fmt::format("'{}': meta.sweep.plan[]", source)));
    const ordered_json& shard = j.at("shard");
    record.shard = {json_integer<int>(shard.at("index"), fmt::format("'{}': meta.sweep.shard.index", source)),
                    json_integer<int>(shard.at("count"), fmt::format("'{}': meta.sweep.shard.count", source)),
                    shard.value("from", std::string())};
  } catch (const nlohmann::json::exception& error) {
    throw UsageError(fmt::format("'{}': meta.sweep is malformed: {}", source, error.what()));
  }
  if (record.shard.count < 1 || record.shard.index < 0 || record.shard.index >= record.shard.count)
    throw UsageError(fmt::format("'{}': meta.sweep names shard {}/{}, which is none", source, record.shard.index,
                                 record.shard.count));
  if (hash_of(record) != record.hash)
    throw UsageError(fmt::format("'{}': meta.sweep.hash {} is not the hash of the sweep it records", source, record.hash));
  return record;
}

std::vector<bool> whole_configurations(const std::vector<Problem>& configurations,
                                       const std::vector<std::string>& implementations, const std::string& backend,
                                       const std::vector<Row>& rows) {
  std::set<std::pair<std::string, std::string>> present;  // (implementation, configuration) on `backend`
  for (const Row& row : rows)
    if (row.backend == backend) present.emplace(row.implementation(), row.problem.describe());
  std::vector<bool> whole(configurations.size(), false);
  for (size_t i = 0; i < configurations.size(); ++i) {
    const std::string described = configurations[i].describe();
    whole[i] = std::all_of(implementations.begin(), implementations.end(),
                           [&](const std::string& name) { return present.contains({name, described}); });
  }
  return whole;
}

}  // namespace flashbench
