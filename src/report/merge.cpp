// flashbench merge: the files of a sweep's shards (or of several runs) and peers' files into one
// results document, refusing pieces that do not belong together and naming what is missing.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/report/json.hpp"
#include "flashbench/report/results_file.hpp"
#include "flashbench/report/summary.hpp"
#include "flashbench/report/sweep_results.hpp"

namespace flashbench {

namespace {

using ordered_json = nlohmann::ordered_json;

struct OwnInput {
  const MergeInput* input;
  std::optional<SweepRecord> sweep;
};

std::string shard_text(const SweepRecord& sweep) {
  return fmt::format("shard {}/{} of sweep {}", sweep.shard.index, sweep.shard.count, sweep.hash);
}

// Shards of one sweep, each once, and nothing else among the own inputs.
void check_shards(const std::vector<OwnInput>& own, const OwnInput& first_shard) {
  const SweepRecord& reference = *first_shard.sweep;
  std::map<int, std::string> holder;  // shard index -> the file that holds it
  for (const OwnInput& o : own) {
    const std::string& path = o.input->path;
    if (!o.sweep)
      throw UsageError(fmt::format("'{}' records no sweep and '{}' is {}: not merging", path, first_shard.input->path,
                                   shard_text(reference)));
    if (o.sweep->hash != reference.hash)
      throw UsageError(fmt::format("shards of different sweeps: '{}' is {}, '{}' is {}; not merging",
                                   first_shard.input->path, shard_text(reference), path, shard_text(*o.sweep)));
    if (o.sweep->shard.count != reference.shard.count || o.sweep->plan != reference.plan)
      throw UsageError(fmt::format("'{}' is {} and '{}' {}, dealt differently; not merging", first_shard.input->path,
                                   shard_text(reference), path, shard_text(*o.sweep)));
    const auto [held, fresh] = holder.emplace(o.sweep->shard.index, path);
    if (!fresh)
      throw UsageError(fmt::format("'{}' and '{}' are both {}; not merging", held->second, path, shard_text(*o.sweep)));
  }
}

// What names a row across files: backend, implementation, configuration.
using RowKey = std::tuple<std::string, std::string, std::string>;
RowKey row_key(const Row& row) { return {row.backend, row.implementation(), row.problem.describe()}; }

// Inputs of one schema version: `input` has the version of `first`.
void require_schema_of(const MergeInput& first, const MergeInput& input) {
  if (input.file.schema_version != first.file.schema_version)
    throw UsageError(fmt::format("schema_version differs: '{}' has {}, '{}' has {}; not merging", first.path,
                                 first.file.schema_version.dump(), input.path, input.file.schema_version.dump()));
}

// Each row (backend, implementation, configuration) once over all own inputs.
void check_no_row_twice(const std::vector<OwnInput>& own) {
  std::map<RowKey, std::string> holder;
  for (const OwnInput& o : own)
    for (const Row& row : o.input->file.rows) {
      const auto [held, fresh] = holder.emplace(row_key(row), o.input->path);
      if (!fresh)
        throw UsageError(fmt::format("'{}' and '{}' both hold {} {} on {}; not merging", held->second, o.input->path,
                                     row.backend, row.implementation(), row.problem.describe()));
    }
}

// A value of the meta (or of an earlier run it resumed) that should agree across the pieces.
std::string device_of(const nlohmann::json& meta) {
  if (meta.contains("gpu") && meta.at("gpu").is_object()) return meta.at("gpu").value("name", std::string("?"));
  if (meta.contains("host") && meta.at("host").is_object()) return meta.at("host").value("cpu", std::string("?"));
  return "";
}
std::string driver_of(const nlohmann::json& meta) {
  if (meta.contains("gpu") && meta.at("gpu").is_object()) return meta.at("gpu").value("driver_version", std::string());
  return "";
}
std::string git_of(const nlohmann::json& meta) { return meta.value("git", std::string()); }

void warn_on_mixed(const std::vector<OwnInput>& own, std::vector<std::string>& warnings) {
  const std::vector<std::pair<std::string, std::string (*)(const nlohmann::json&)>> facts = {
      {"devices", device_of}, {"drivers", driver_of}, {"git revisions", git_of}};
  for (const auto& [what, fact_of] : facts) {
    std::map<std::string, std::vector<std::string>> files_of;  // value -> files
    for (const OwnInput& o : own) {
      const nlohmann::json meta(o.input->file.meta);
      if (!meta.is_object()) continue;
      std::vector<nlohmann::json> runs{meta};
      if (meta.contains("resumed_from") && meta.at("resumed_from").is_array())
        for (const nlohmann::json& earlier : meta.at("resumed_from")) runs.push_back(earlier);
      for (const nlohmann::json& run : runs) {
        const std::string value = fact_of(run);
        if (value.empty()) continue;
        std::vector<std::string>& files = files_of[value];
        if (std::find(files.begin(), files.end(), o.input->path) == files.end()) files.push_back(o.input->path);
      }
    }
    if (files_of.size() < 2) continue;
    std::string text = fmt::format("mixed {}:", what);
    for (const auto& [value, files] : files_of) {
      std::string names;
      for (const std::string& file : files) names += (names.empty() ? "" : ", ") + file;
      text += fmt::format(" '{}' ({});", value, names);
    }
    text.pop_back();
    warnings.push_back(text);
  }
}

}  // namespace

std::vector<int> MergeResult::shards_to_rerun() const {
  std::set<int> shards;
  for (const MissingConfiguration& m : missing) shards.insert(m.shard);
  return {shards.begin(), shards.end()};
}

MergeResult merge_results(const std::vector<MergeInput>& inputs) {
  MergeResult result;
  std::vector<const MergeInput*> present;
  for (const MergeInput& input : inputs) {
    const ResultsFile& file = input.file;
    if (file.cut_last_line)
      result.warnings.push_back(fmt::format("'{}': its last line was cut short (a process killed while writing it) "
                                            "and is left out",
                                            input.path));
    if (file.schema_version.is_null() && file.rows.empty() && file.meta.is_null()) continue;  // wrote nothing
    if (file.schema_version.is_null())
      throw UsageError(fmt::format("'{}' names no schema_version: cannot tell whether it merges", input.path));
    if (!present.empty()) require_schema_of(*present.front(), input);
    present.push_back(&input);
  }
  if (present.empty()) throw UsageError("nothing to merge: no input holds a results document");

  std::vector<OwnInput> own;
  std::vector<const MergeInput*> peers;
  for (const MergeInput* input : present) {
    if (input->peer) peers.push_back(input);
    else own.push_back({input, sweep_record_of(input->file.meta, input->path)});
  }
  const auto first_shard =
      std::find_if(own.begin(), own.end(), [](const OwnInput& o) { return o.sweep && o.sweep->shard.count > 1; });
  result.sharded = first_shard != own.end();
  if (result.sharded) check_shards(own, *first_shard);
  check_no_row_twice(own);
  warn_on_mixed(own, result.warnings);

  // Rows of one sweep go in the sweep's order, as one process would have written them.
  const bool one_sweep = !own.empty() && std::all_of(own.begin(), own.end(), [&](const OwnInput& o) {
    return o.sweep && o.sweep->hash == own.front().sweep->hash;
  });
  struct Placed {
    size_t configuration, implementation, input, row;
  };
  std::vector<Placed> placed;
  std::map<std::string, size_t> configuration_index;
  std::map<std::string, size_t> implementation_index;
  if (one_sweep) {
    const std::vector<Problem> configurations = own.front().sweep->configurations();
    for (size_t i = 0; i < configurations.size(); ++i) configuration_index.emplace(configurations[i].describe(), i);
    const std::vector<std::string>& names = own.front().sweep->implementations;
    for (size_t i = 0; i < names.size(); ++i) implementation_index.emplace(names[i], i);
  }
  const auto index_in = [](const std::map<std::string, size_t>& index, const std::string& key) {
    const auto found = index.find(key);
    return found == index.end() ? index.size() : found->second;  // rows outside the sweep after it
  };
  for (size_t i = 0; i < own.size(); ++i)
    for (size_t r = 0; r < own[i].input->file.rows.size(); ++r) {
      const Row& row = own[i].input->file.rows[r];
      placed.push_back({index_in(configuration_index, row.problem.describe()),
                        index_in(implementation_index, row.implementation()), i, r});
    }
  if (one_sweep)
    std::stable_sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
      return std::tie(a.configuration, a.implementation) < std::tie(b.configuration, b.implementation);
    });

  ordered_json rows = ordered_json::array();
  std::vector<Row> parsed;
  for (const Placed& p : placed) {
    rows.push_back(own[p.input].input->file.row_objects[p.row]);
    parsed.push_back(own[p.input].input->file.rows[p.row]);
  }
  for (const MergeInput* peer : peers)
    for (size_t r = 0; r < peer->file.rows.size(); ++r) {
      rows.push_back(peer->file.row_objects[r]);
      parsed.push_back(peer->file.rows[r]);
    }
  result.rows = parsed.size();

  // What no input holds whole: from each sweep's own list of configurations; a file of no sweep can
  // only say what it did not run (meta.not_run of an interrupted run).
  std::set<std::string> seen_sweeps;
  std::vector<Row> own_rows;
  for (const OwnInput& o : own) own_rows.insert(own_rows.end(), o.input->file.rows.begin(), o.input->file.rows.end());
  for (const OwnInput& o : own) {
    if (!o.sweep) {
      const ordered_json& meta = o.input->file.meta;
      if (meta.is_object() && meta.contains("not_run") && meta.at("not_run").is_array())
        for (const ordered_json& description : meta.at("not_run"))
          if (description.is_string()) result.missing.push_back({description.get<std::string>(), 0});
      continue;
    }
    if (!seen_sweeps.insert(o.sweep->hash).second) continue;
    const std::vector<Problem> configurations = o.sweep->configurations();
    const std::string backend = o.sweep->spec.value("backend", std::string("cpu"));
    const std::vector<bool> whole = whole_configurations(configurations, o.sweep->implementations, backend, own_rows);
    for (size_t i = 0; i < configurations.size(); ++i)
      if (!whole[i]) result.missing.push_back({configurations[i].describe(), o.sweep->plan[i]});
  }

  ordered_json meta = own.empty() ? ordered_json::object() : own.front().input->file.meta;
  for (const char* key : {"resumed_from", "inputs", "complete", "not_run"}) meta.erase(key);
  if (one_sweep && meta.contains("sweep")) meta["sweep"]["shard"] = {{"index", 0}, {"count", 1}, {"from", "merge"}};
  meta["inputs"] = ordered_json::array();
  for (const OwnInput& o : own) meta["inputs"].push_back({{"file", o.input->path}, {"meta", o.input->file.meta}});
  if (!peers.empty()) {
    ordered_json peer_metas = meta.contains("peers") && meta.at("peers").is_array() ? meta.at("peers") : ordered_json::array();
    for (const MergeInput* peer : peers) peer_metas.push_back(peer->file.meta);
    meta["peers"] = peer_metas;
  }
  meta["complete"] = result.missing.empty();
  if (!result.missing.empty()) {
    meta["not_run"] = ordered_json::array();
    for (const MissingConfiguration& m : result.missing) meta["not_run"].push_back(m.description);
  }

  result.document["schema_version"] = present.front()->file.schema_version;
  result.document["meta"] = std::move(meta);
  result.document["rows"] = std::move(rows);
  const SweepSummary summary = summarize_sweep(parsed);
  if (summary.has_scaling()) result.document["summary"] = summary.to_json();
  return result;
}

MergeResult merge_runs_as_rounds(const std::vector<MergeInput>& inputs) {
  if (inputs.size() < 2) throw UsageError("--rounds merges two or more runs of the same rows");
  std::vector<OwnInput> own;
  for (const MergeInput& input : inputs) {
    if (input.peer) throw UsageError(fmt::format("'{}' is a peer's file: --rounds merges flashbench's own runs", input.path));
    require_schema_of(inputs.front(), input);
    own.push_back({&input, std::nullopt});
  }
  MergeResult result;
  warn_on_mixed(own, result.warnings);

  const auto name_of = [](const RowKey& key) {
    return fmt::format("{} {} on {}", std::get<0>(key), std::get<1>(key), std::get<2>(key));
  };
  // Each run's rows by key, each key once.
  std::vector<std::map<RowKey, const Row*>> runs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    for (const Row& row : inputs[i].file.rows)
      if (!runs[i].emplace(row_key(row), &row).second)
        throw UsageError(fmt::format("'{}' holds {} twice; not merging", inputs[i].path, name_of(row_key(row))));
  for (size_t i = 1; i < inputs.size(); ++i)
    for (const auto& [key, row] : runs[i])
      if (!runs.front().count(key))
        throw UsageError(fmt::format("'{}' holds {}, which '{}' does not: rounds are runs of the same rows", inputs[i].path,
                                     name_of(key), inputs.front().path));

  ordered_json rows = ordered_json::array();
  std::vector<Row> parsed;
  for (const Row& first : inputs.front().file.rows) {
    const RowKey key = row_key(first);
    Row merged = first;
    std::vector<TimingSummary> fwd, bwd;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto found = runs[i].find(key);
      if (found == runs[i].end())
        throw UsageError(fmt::format("'{}' has no {}: rounds are runs of the same rows", inputs[i].path, name_of(key)));
      const Row& row = *found->second;
      if ((row.status == Status::ok) != (first.status == Status::ok))
        throw UsageError(fmt::format("{} ran in '{}' and not in '{}'; not merging", name_of(key),
                                     (first.status == Status::ok ? inputs.front() : inputs[i]).path,
                                     (first.status == Status::ok ? inputs[i] : inputs.front()).path));
      fwd.push_back(row.fwd);
      bwd.push_back(row.bwd);
    }
    if (first.status == Status::ok) {
      merged.fwd = merge_rounds(fwd, first.fwd.noise_target);
      merged.bwd = merge_rounds(bwd, first.bwd.noise_target);
    }
    rows.push_back(row_to_json(merged));
    parsed.push_back(std::move(merged));
  }
  result.rows = parsed.size();

  ordered_json meta = inputs.front().file.meta.is_object() ? inputs.front().file.meta : ordered_json::object();
  meta.erase("inputs");
  meta["inputs"] = ordered_json::array();
  for (const MergeInput& input : inputs) meta["inputs"].push_back({{"file", input.path}, {"meta", input.file.meta}});
  meta["rounds"] = inputs.size();
  result.document["schema_version"] = inputs.front().file.schema_version;
  result.document["meta"] = std::move(meta);
  result.document["rows"] = std::move(rows);
  const SweepSummary summary = summarize_sweep(parsed);
  if (summary.has_scaling()) result.document["summary"] = summary.to_json();
  return result;
}

}  // namespace flashbench
