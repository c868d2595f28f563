// Sharding a sweep: --shard parsing (by hand and from a job array's environment), dealing
// configurations by modelled time, the stable hash, the resolved sweep written and read back, which
// configurations rows hold whole, and merging shards with its refusals.
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/shard.hpp"
#include "flashbench/core/sweep.hpp"
#include "flashbench/model/model.hpp"
#include "flashbench/report/json.hpp"
#include "flashbench/report/results_file.hpp"
#include "flashbench/report/sweep_results.hpp"

namespace flashbench {
namespace {

std::string usage_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no UsageError)";
}

EnvironmentLookup environment(std::map<std::string, std::string> variables) {
  return [variables](const char* name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

TEST(ParseShard, ByHand) {
  const Shard shard = parse_shard("2/5", environment({}));
  EXPECT_EQ(shard.index, 2);
  EXPECT_EQ(shard.count, 5);
  EXPECT_EQ(shard.source, "--shard");
  EXPECT_EQ(parse_shard("0/1", environment({})).count, 1);
}

TEST(ParseShard, RefusesWhatIsNoShard) {
  const auto none = environment({});
  EXPECT_EQ(usage_message([&] { parse_shard("4/4", none); }),
            "--shard 4/4: index 4 is not below the shard count 4 (indices are 0 to 3)");
  EXPECT_EQ(usage_message([&] { parse_shard("1/0", none); }), "--shard 1/0: the shard count must be at least 1");
  EXPECT_EQ(usage_message([&] { parse_shard("x/4", none); }), "--shard x/4: index 'x' is not a whole number");
  EXPECT_EQ(usage_message([&] { parse_shard("-1/4", none); }), "--shard -1/4: index '-1' is not a whole number");
  EXPECT_EQ(usage_message([&] { parse_shard("1", none); }), "--shard '1': expected I/N (e.g. 0/4), auto or auto/N");
  EXPECT_EQ(usage_message([&] { parse_shard("auto", none); }),
            "--shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX (a Kubernetes "
            "indexed job) is set; give I/N instead");
}

TEST(ParseShard, FromASlurmJobArray) {
  const Shard shard = parse_shard("auto", environment({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "8"},
                                                       {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_MAX", "7"}}));
  EXPECT_EQ(shard.index, 3);
  EXPECT_EQ(shard.count, 8);
  EXPECT_EQ(shard.source, "SLURM_ARRAY_TASK_ID");
  // A resubmission of two of the eight: its array is not the sweep's.
  const auto rerun = environment({{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "2"},
                                  {"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_MAX", "5"}});
  EXPECT_NE(usage_message([&] { parse_shard("auto", rerun); }).find("give it as --shard auto/N"), std::string::npos);
  EXPECT_EQ(parse_shard("auto/8", rerun).count, 8);
  EXPECT_EQ(parse_shard("auto/8", rerun).index, 5);
  const Shard counted = parse_shard("auto", [&](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "FLASHBENCH_SHARD_COUNT") return "8";
    return rerun(name);
  });
  EXPECT_EQ(counted.count, 8);
  EXPECT_EQ(counted.index, 5);
  EXPECT_EQ(usage_message([&] { parse_shard("auto/4", rerun); }),
            "--shard auto/4: index 5 is not below the shard count 4 (indices are 0 to 3)");
}

TEST(ParseShard, FromAKubernetesIndexedJob) {
  EXPECT_EQ(parse_shard("auto/6", environment({{"JOB_COMPLETION_INDEX", "4"}})).index, 4);
  const Shard shard = parse_shard("auto", environment({{"JOB_COMPLETION_INDEX", "1"}, {"FLASHBENCH_SHARD_COUNT", "3"}}));
  EXPECT_EQ(shard.count, 3);
  EXPECT_EQ(shard.source, "JOB_COMPLETION_INDEX");
  EXPECT_EQ(usage_message([] { parse_shard("auto", environment({{"JOB_COMPLETION_INDEX", "1"}})); }),
            "--shard auto: JOB_COMPLETION_INDEX is set but not the number of shards: give --shard auto/N or "
            "FLASHBENCH_SHARD_COUNT");
  EXPECT_EQ(usage_message([] { parse_shard("auto/3", environment({{"JOB_COMPLETION_INDEX", "one"}})); }),
            "--shard auto: JOB_COMPLETION_INDEX='one' is not a whole number");
}

TEST(DealByCost, LongestFirstToTheLightestShard) {
  // 5 -> 0, 4 -> 1, 3 -> 1 (4 < 5), 3 -> 0 (5 < 7), 2 -> 1 (7 < 8), 1 -> 0 (8 < 9): 9 and 9.
  const std::vector<double> costs = {5, 4, 3, 3, 2, 1};
  EXPECT_EQ(deal_by_cost(costs, 2), std::vector<int>({0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(deal_by_cost(costs, 1), std::vector<int>(6, 0));
  EXPECT_EQ(deal_by_cost(std::vector<double>{1, 1}, 4), std::vector<int>({0, 1}));  // more shards than configurations
}

TEST(DealByCost, ShardsFinishWithinTheLargestCostOfEachOther) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> cost(0.01, 10.0);
  for (int shards : {2, 3, 4, 7}) {
    std::vector<double> costs(41);
    for (double& c : costs) c = cost(random);
    const std::vector<int> plan = deal_by_cost(costs, shards);
    std::vector<double> load(shards, 0.0);
    for (size_t i = 0; i < costs.size(); ++i) {
      ASSERT_GE(plan[i], 0);
      ASSERT_LT(plan[i], shards);
      load[plan[i]] += costs[i];
    }
    const auto [lightest, heaviest] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*heaviest - *lightest, *std::max_element(costs.begin(), costs.end())) << shards << " shards";
    EXPECT_EQ(plan, deal_by_cost(costs, shards));  // the same plan every time
  }
}

TEST(ModelledRunSeconds, GrowsWithTheWorkUntilMaxTimeCapsTheSamples) {
  SamplingPolicy policy;
  policy.warmup = 1;
  policy.warmup_ms = 0;
  policy.min_samples = 5;
  policy.max_samples = 100;
  policy.max_time_s = 1.0;
  Problem small;
  small.seq = 1024;
  Problem large = small;
  large.seq = 4096;
  const double rate = 1e11;
  const double pass_small = (small.forward_flop() + small.backward_flop()) / rate;
  // Small (a pass of 75 ms): max_time ends the samples before max_samples: warm-up + measured pass + 1 s.
  EXPECT_DOUBLE_EQ(modelled_run_seconds(small, 1, policy, rate), 2 * pass_small + 1.0);
  EXPECT_DOUBLE_EQ(modelled_run_seconds(small, 4, policy, rate), 4 * (2 * pass_small + 1.0));
  // Large x 16 the work: still capped by max_time, but min_samples of a slow pass can pass it.
  const double pass_large = (large.forward_flop() + large.backward_flop()) / rate;
  EXPECT_DOUBLE_EQ(modelled_run_seconds(large, 1, policy, rate), 2 * pass_large + std::max(1.0, 5 * pass_large));
  EXPECT_DOUBLE_EQ(modelled_run_seconds(large, 1, policy, 1e8), 2 * pass_large * 1e3 + 5 * pass_large * 1e3);
}

TEST(StableHash, IsFnv1a64) {
  EXPECT_EQ(stable_hash(""), "cbf29ce484222325");  // the published test vectors
  EXPECT_EQ(stable_hash("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(stable_hash("foobar"), "85944171f73967e8");
}

TEST(ArrayIndices, InSlurmsForm) {
  EXPECT_EQ(array_indices({3, 0, 1, 2, 5, 7, 8, 8}), "0-3,5,7,8");
  EXPECT_EQ(array_indices({9}), "9");
  EXPECT_EQ(array_indices({}), "");
}

SweepSpec small_sweep() {
  SweepSpec spec;
  spec.seq = {64, 128, 256};
  spec.heads = {1, 2};
  spec.head_dim = {16};
  spec.causal = {false, true};
  spec.variants = {Variant::standard, Variant::v2};
  spec.sampling.max_time_s = 0.5;
  spec.threads = 1;
  return spec;
}

TEST(SweepToJson, ReadsBackToTheSameSweep) {
  SweepSpec spec = small_sweep();
  spec.description = "round trip";
  spec.dtype = {Dtype::bf16, Dtype::fp32};
  const SweepSpec back = parse_sweep_json(sweep_to_json(spec).dump(), "test");
  EXPECT_EQ(sweep_to_json(back), sweep_to_json(spec));
  const std::vector<Problem> a = expand(spec), b = expand(back);
  ASSERT_EQ(a.size(), 24u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].describe(), b[i].describe());
  spec.implementations = {"v2.split"};
  EXPECT_EQ(parse_sweep_json(sweep_to_json(spec).dump(), "test").implementations, spec.implementations);
}

Row row_of(const Problem& problem, const std::string& impl, Status status = Status::ok) {
  Row row;
  row.backend = "cpu";
  row.variant = impl == "standard" ? Variant::standard : Variant::v2;
  row.impl = impl;
  row.problem = problem;
  row.status = status;
  return row;
}

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

TEST(WholeConfigurations, NeedsARowOfEveryImplementation) {
  const std::vector<Problem> problems = expand(small_sweep());
  const std::vector<Row> rows = {row_of(problems[0], "standard"), row_of(problems[0], "v2", Status::failed),
                                 row_of(problems[1], "standard")};
  const std::vector<bool> whole = whole_configurations(problems, {"standard", "v2"}, "cpu", rows);
  EXPECT_TRUE(whole[0]);   // a failed row counts: the configuration ran
  EXPECT_FALSE(whole[1]);  // v2 missing: cut short
  EXPECT_EQ(std::count(whole.begin(), whole.end(), true), 1);
  EXPECT_FALSE(whole_configurations(problems, {"standard", "v2"}, "cuda", rows)[0]);
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
