// Merging results files (report/sweep_results.hpp, `flashbench merge`): the shards of a sweep come
// back as the rows of one process in its order; what is missing is named with the shards to rerun;
// pieces that do not belong together are refused; mixed devices and revisions are warned about and
// peers kept apart; whole runs merged as rounds (`run --rounds`, gpu-ab.sh) and their refusals. The
// shards are those `run --shard` writes of a small sweep (tests/core/shard_test.cpp tests the
// sharding itself).
#include <algorithm>
#include <functional>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/shard.hpp"
#include "flashbench/core/sweep.hpp"
#include "flashbench/model/model.hpp"
#include "flashbench/report/json.hpp"
#include "flashbench/report/results_file.hpp"
#include "flashbench/report/sweep_results.hpp"

#include "support/sweep_fixtures.hpp"

namespace flashbench {
namespace {

using testing::usage_message;
using testing::small_sweep;
using testing::row_of;

// What `run --shard index/count` of small_sweep() writes when it finishes configurations `ran` of
// its share (all of them when empty).
ResultsFile shard_file(const SweepSpec& spec, int index, int count, const nlohmann::ordered_json& settings,
                       const std::string& device = "Test CPU") {
  const std::vector<Problem> problems = expand(spec);
  std::vector<double> costs;
  for (const Problem& p : problems) costs.push_back(modelled_run_seconds(p, 2, spec.sampling, 1e11));
  const SweepRecord record = make_sweep_record(spec, settings, {"standard", "v2"}, costs, {index, count, "--shard"});
  ResultsFile file;
  file.schema_version = 1;
  file.meta = {{"tool", "flashbench"}, {"git", "abc"}, {"host", {{"cpu", device}}}, {"sweep", to_json(record)}};
  for (size_t i = 0; i < problems.size(); ++i) {
    if (record.plan[i] != index) continue;
    for (const char* impl : {"standard", "v2"}) {
      const Row row = row_of(problems[i], impl, problems[i].seq == 256 && impl == std::string("standard") ? Status::skipped : Status::ok);
      file.rows.push_back(row);
      file.row_objects.push_back(row_to_json(row));
    }
  }
  return file;
}

std::vector<std::string> row_keys(const nlohmann::ordered_json& rows) {
  std::vector<std::string> keys;
  for (const auto& row : rows) keys.push_back(row.at("impl").get<std::string>() + " " + row.at("problem").dump() + " " +
                                              row.at("status").get<std::string>());
  return keys;
}

TEST(MergeResults, ShardsComeBackInTheSweepsOrder) {
  const SweepSpec spec = small_sweep();
  const nlohmann::ordered_json settings = {{"seed", 1}};
  std::vector<MergeInput> inputs;
  for (int index : {2, 0, 1}) inputs.push_back({fmt::format("shard-{}.jsonl", index), shard_file(spec, index, 3, settings)});
  const MergeResult merged = merge_results(inputs);
  const ResultsFile whole = shard_file(spec, 0, 1, settings);  // the same sweep in one process
  EXPECT_EQ(row_keys(merged.document.at("rows")), row_keys(nlohmann::ordered_json(whole.row_objects)));
  EXPECT_TRUE(merged.missing.empty());
  EXPECT_TRUE(merged.sharded);
  EXPECT_TRUE(merged.warnings.empty());
  EXPECT_EQ(merged.document.at("meta").at("complete"), true);
  EXPECT_EQ(merged.document.at("meta").at("inputs").size(), 3u);
  EXPECT_EQ(merged.document.at("meta").at("sweep").at("shard").at("count"), 1);
}

TEST(MergeResults, NamesWhatIsMissingAndTheShardsToRerun) {
  const SweepSpec spec = small_sweep();
  ResultsFile cut = shard_file(spec, 1, 4, {});
  cut.rows.pop_back();  // the last configuration of shard 1 lost its v2 row
  cut.row_objects.pop_back();
  const MergeResult merged = merge_results({{"shard-0.jsonl", shard_file(spec, 0, 4, {})}, {"shard-1.jsonl", cut},
                                            {"shard-3.jsonl", shard_file(spec, 3, 4, {})}});
  const SweepRecord record = *sweep_record_of(shard_file(spec, 2, 4, {}).meta, "shard-2");
  const size_t in_shard_2 = size_t(std::count(record.plan.begin(), record.plan.end(), 2));
  ASSERT_EQ(merged.missing.size(), in_shard_2 + 1);
  EXPECT_EQ(merged.shards_to_rerun(), std::vector<int>({1, 2}));
  EXPECT_EQ(array_indices(merged.shards_to_rerun()), "1,2");
  EXPECT_EQ(merged.document.at("meta").at("complete"), false);
  EXPECT_EQ(merged.document.at("meta").at("not_run").size(), merged.missing.size());
}

TEST(MergeResults, RefusesPiecesThatDoNotBelongTogether) {
  const SweepSpec spec = small_sweep();
  const ResultsFile shard0 = shard_file(spec, 0, 2, {{"seed", 1}}), shard1 = shard_file(spec, 1, 2, {{"seed", 1}});
  const ResultsFile other_seed = shard_file(spec, 1, 2, {{"seed", 2}});
  const auto refusal = [](std::vector<MergeInput> inputs) { return usage_message([&] { merge_results(inputs); }); };
  const std::string hash0 = shard0.meta.at("sweep").at("hash"), hash2 = other_seed.meta.at("sweep").at("hash");
  EXPECT_EQ(refusal({{"a.jsonl", shard0}, {"b.jsonl", other_seed}}),
            fmt::format("shards of different sweeps: 'a.jsonl' is shard 0/2 of sweep {}, 'b.jsonl' is shard 1/2 of "
                        "sweep {}; not merging", hash0, hash2));
  EXPECT_EQ(refusal({{"a.jsonl", shard0}, {"again.jsonl", shard0}}),
            fmt::format("'a.jsonl' and 'again.jsonl' are both shard 0/2 of sweep {}; not merging", hash0));
  ResultsFile plain = shard1;
  plain.meta.erase("sweep");
  EXPECT_EQ(refusal({{"a.jsonl", shard0}, {"plain.json", plain}}),
            fmt::format("'plain.json' records no sweep and 'a.jsonl' is shard 0/2 of sweep {}: not merging", hash0));
  ResultsFile newer = shard1;
  newer.schema_version = 2;
  EXPECT_EQ(refusal({{"a.jsonl", shard0}, {"b.jsonl", newer}}),
            "schema_version differs: 'a.jsonl' has 1, 'b.jsonl' has 2; not merging");
  ResultsFile unnamed = shard1;
  unnamed.schema_version = nullptr;
  EXPECT_EQ(refusal({{"a.jsonl", shard0}, {"b.jsonl", unnamed}}),
            "'b.jsonl' names no schema_version: cannot tell whether it merges");
  // Two whole runs (no shards) merge file by file, but never with a row twice.
  ResultsFile run_a = plain, run_b = plain;
  EXPECT_NE(refusal({{"a.json", run_a}, {"b.json", run_b}}).find("both hold cpu"), std::string::npos);
  EXPECT_EQ(refusal({{"empty.jsonl", ResultsFile{}}}), "nothing to merge: no input holds a results document");
  ResultsFile tampered = shard1;
  tampered.meta["sweep"]["settings"]["seed"] = 3;
  EXPECT_NE(refusal({{"a.jsonl", shard0}, {"t.jsonl", tampered}}).find("is not the hash of the sweep it records"),
            std::string::npos);
  ResultsFile dealt_otherwise = shard1;
  dealt_otherwise.meta["sweep"]["plan"][0] = 1 - dealt_otherwise.meta["sweep"]["plan"][0].get<int>();
  EXPECT_EQ(refusal({{"a.jsonl", shard0}, {"b.jsonl", dealt_otherwise}}),
            fmt::format("'a.jsonl' is shard 0/2 of sweep {0} and 'b.jsonl' shard 1/2 of sweep {0}, dealt differently; "
                        "not merging", hash0));
}

TEST(MergeResults, WarnsOnMixedDevicesAndKeepsPeersApart) {
  const SweepSpec spec = small_sweep();
  ResultsFile shard1 = shard_file(spec, 1, 2, {}, "Other CPU");
  shard1.meta["git"] = "def";
  ResultsFile peer;
  peer.schema_version = 1;
  peer.meta = {{"tool", "torch_sdpa.py"}};
  Row peer_row = row_of(expand(spec)[0], "v2");
  peer_row.backend = "torch-sdpa-flash";
  peer.rows = {peer_row};
  peer.row_objects = {{{"backend", "torch-sdpa-flash"}, {"variant", "v2"}, {"note", "kept as written"}}};
  const MergeResult merged =
      merge_results({{"a.jsonl", shard_file(spec, 0, 2, {})}, {"b.jsonl", shard1}, {"peer.json", peer, true}});
  ASSERT_EQ(merged.warnings.size(), 2u);
  EXPECT_EQ(merged.warnings[0], "mixed devices: 'Other CPU' (b.jsonl); 'Test CPU' (a.jsonl)");
  EXPECT_EQ(merged.warnings[1], "mixed git revisions: 'abc' (a.jsonl); 'def' (b.jsonl)");
  EXPECT_EQ(merged.document.at("rows").back(), peer.row_objects[0]);
  EXPECT_EQ(merged.document.at("meta").at("peers"), nlohmann::ordered_json::array({peer.meta}));
  EXPECT_TRUE(merged.missing.empty());
}

// A whole run of small_sweep() whose ok rows' forward and backward samples are `fwd` and `bwd`.
ResultsFile timed_run(const std::vector<double>& fwd, const std::vector<double>& bwd) {
  ResultsFile file = shard_file(small_sweep(), 0, 1, {});
  file.row_objects.clear();
  for (Row& row : file.rows) {
    if (row.status == Status::ok) {
      row.fwd = summarize(fwd, 0.02);
      row.bwd = summarize(bwd, 0.02);
    }
    file.row_objects.push_back(row_to_json(row));
  }
  return file;
}

TEST(MergeRunsAsRounds, EachRunIsARoundOfEveryRow) {
  const MergeResult merged =
      merge_runs_as_rounds({{"r1.json", timed_run({1, 2, 3}, {4, 5, 6})}, {"r2.json", timed_run({2, 3, 4, 5}, {6, 7, 8})}});
  const ResultsFile first = timed_run({1, 2, 3}, {4, 5, 6});
  ASSERT_EQ(merged.rows, first.rows.size());
  EXPECT_EQ(row_keys(merged.document.at("rows")), row_keys(nlohmann::ordered_json(first.row_objects)));
  EXPECT_EQ(merged.document.at("meta").at("rounds"), 2);
  EXPECT_EQ(merged.document.at("meta").at("inputs").size(), 2u);
  size_t ok = 0;
  for (size_t i = 0; i < merged.rows; ++i) {
    const nlohmann::ordered_json& object = merged.document.at("rows").at(i);
    const Row row = row_from_json(object);
    if (row.status != Status::ok) {
      EXPECT_EQ(row.fwd.count(), 0u);  // a skipped row stays as it was
      continue;
    }
    ++ok;
    EXPECT_EQ(row.fwd.samples_ms, (std::vector<double>{1, 2, 3, 2, 3, 4, 5}));
    EXPECT_EQ(row.fwd.round_medians_ms, (std::vector<double>{2, 3.5}));
    EXPECT_DOUBLE_EQ(row.fwd.median_ms, 3);
    EXPECT_EQ(row.bwd.round_medians_ms, (std::vector<double>{5, 7}));
    // the throughput follows the merged median (3 ms), not the first run's (2 ms)
    EXPECT_DOUBLE_EQ(object.at("throughput").at("fwd_tflops").get<double>(), row.fwd_tflops());
    EXPECT_NEAR(row.fwd_tflops() * 3.0, 2.0 * first.rows[i].fwd_tflops(), 1e-9 * row.fwd_tflops());
  }
  EXPECT_GT(ok, 0u);
}

TEST(MergeRunsAsRounds, RefusesRunsOfOtherRows) {
  const auto refusal = [](std::vector<MergeInput> inputs) {
    return usage_message([&] { merge_runs_as_rounds(inputs); });
  };
  const ResultsFile run = timed_run({1}, {2});
  EXPECT_EQ(refusal({{"r1.json", run}}), "--rounds merges two or more runs of the same rows");
  ResultsFile shorter = run;
  shorter.rows.pop_back();
  shorter.row_objects.pop_back();
  EXPECT_NE(refusal({{"r1.json", run}, {"r2.json", shorter}}).find("'r2.json' has no cpu"), std::string::npos);
  EXPECT_NE(refusal({{"r1.json", shorter}, {"r2.json", run}}).find("which 'r1.json' does not"), std::string::npos);
  ResultsFile twice = run;
  twice.rows.push_back(run.rows.front());
  EXPECT_NE(refusal({{"r1.json", run}, {"r2.json", twice}}).find("holds cpu standard on"), std::string::npos);
  ResultsFile failed = run;
  for (Row& row : failed.rows)
    if (row.status == Status::ok) {
      row.status = Status::failed;
      break;
    }
  EXPECT_NE(refusal({{"r1.json", run}, {"r2.json", failed}}).find("ran in 'r1.json' and not in 'r2.json'"),
            std::string::npos);
  ResultsFile newer = run;
  newer.schema_version = 2;
  EXPECT_NE(refusal({{"r1.json", run}, {"r2.json", newer}}).find("schema_version differs"), std::string::npos);
  EXPECT_NE(refusal({{"r1.json", run}, {"peer.json", run, true}}).find("is a peer's file"), std::string::npos);
}

}  // namespace
}  // namespace flashbench
