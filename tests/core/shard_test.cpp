// Sharding a sweep: --shard parsing (by hand and from a job array's environment), dealing
// configurations by modelled time, the stable hash, the resolved sweep written and read back, and
// which configurations rows hold whole. Merging the shards back: tests/report/merge_test.cpp.
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/shard.hpp"
#include "flashbench/core/sweep.hpp"
#include "flashbench/model/model.hpp"
#include "flashbench/report/sweep_results.hpp"

#include "support/sweep_fixtures.hpp"

namespace flashbench {
namespace {

using testing::usage_message;
using testing::small_sweep;
using testing::row_of;

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

}  // namespace
}  // namespace flashbench
