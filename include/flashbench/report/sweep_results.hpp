#pragma once
// The pieces of one sweep's results: what a run records about its sweep (meta.sweep), which
// configurations a results file holds whole (for `run --resume`), and putting the files of a sweep's
// shards, or of several runs, back into one document (`flashbench merge`).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/core/problem.hpp"
#include "flashbench/core/shard.hpp"
#include "flashbench/core/sweep.hpp"
#include "flashbench/report/results_file.hpp"

namespace flashbench {

// meta.sweep: the resolved sweep a run belongs to and its share of it (docs/json.md).
struct SweepRecord {
  std::string hash;                          // stable_hash of spec, settings and implementations
  nlohmann::ordered_json spec;               // sweep_to_json: expands to the sweep's configurations
  nlohmann::ordered_json settings;           // the run's other choices that decide its rows (seed, check, ...)
  std::vector<std::string> implementations;  // the names run on every configuration, in order
  std::vector<int> plan;                     // the shard of each configuration, in the sweep's order
  Shard shard;                               // this run's share
  std::vector<Problem> configurations() const;  // expand(spec)
};

// Deals the sweep's configurations to shard.count shards by modelled cost (`costs`, one per
// configuration) and hashes the sweep. `spec` is the resolved sweep, `settings` what else decides the rows.
SweepRecord make_sweep_record(const SweepSpec& spec, nlohmann::ordered_json settings,
                              std::vector<std::string> implementations, const std::vector<double>& costs,
                              Shard shard);
nlohmann::ordered_json to_json(const SweepRecord& record);
// meta.sweep of a results file's meta; nullopt when there is none (files from before it, peers'
// files). Throws UsageError naming `source` when it is there but malformed.
std::optional<SweepRecord> sweep_record_of(const nlohmann::ordered_json& meta, std::string_view source);

// For each configuration: whether `rows` hold a row of every implementation on it (on `backend`),
// whatever its status. A configuration with some of its rows is not whole: an interrupted process
// may have written the first implementations' rows and not the rest.
std::vector<bool> whole_configurations(const std::vector<Problem>& configurations,
                                       const std::vector<std::string>& implementations, const std::string& backend,
                                       const std::vector<Row>& rows);

// One file given to `merge`: flashbench's own results (a shard, a whole run) or a peer's.
struct MergeInput {
  std::string path;
  ResultsFile file;
  bool peer = false;
};

struct MissingConfiguration {
  std::string description;  // Problem::describe
  int shard = 0;            // the shard that should have run it
};

struct MergeResult {
  nlohmann::ordered_json document;             // {schema_version, meta, rows[, summary]}
  size_t rows = 0;
  std::vector<std::string> warnings;           // mixed devices, drivers, git revisions; cut lines
  std::vector<MissingConfiguration> missing;   // configurations of the sweep(s) no input holds whole
  bool sharded = false;                        // the inputs are shards of one sweep
  std::vector<int> shards_to_rerun() const;    // the shards of `missing`, ascending, once each
};

// One document from the inputs. Own rows are kept as they were written: for the shards of one sweep
// (or one sweep's runs) in the sweep's order, configuration by configuration, so the result reads as
// a single process's run; for runs of different sweeps (none of them a shard) file by file. Peers'
// rows follow, their metas in meta.peers. The merged meta is the first own input's, with every
// input's meta under meta.inputs, meta.complete and meta.not_run as a run writes them. Refuses
// (UsageError): inputs whose schema_version differ or that name none, shards of different sweeps (by
// hash), of one sweep dealt differently (another shard count or plan), shards beside a file of no
// sweep, one shard given twice, a row (backend, implementation, configuration) present twice, and
// nothing to merge.
MergeResult merge_results(const std::vector<MergeInput>& inputs);

// Runs of the same rows one after another (say two builds alternated, each run once a round) as
// rounds of one run: each row's forward and backward timings become those of its runs, every sample
// kept and each run's median a round's (as `run --rounds` records them), so that `compare` judges
// the runs together; every other field is the first run's, the throughput recomputed. The meta is
// the first run's, with every input's under meta.inputs and meta.rounds their count. Refuses
// (UsageError): fewer than two inputs, peers' files, differing schema versions, a row that is not
// in every run (or is twice in one), and a row that ran in one run and not in another.
MergeResult merge_runs_as_rounds(const std::vector<MergeInput>& inputs);

}  // namespace flashbench
