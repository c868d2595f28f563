// Plugins (plugin.h, harness/plugins.hpp): what is refused at load, and the example plugins run by
// the runner on the CPU beside a built-in implementation: the naive one checked against float64
// with its memory exactly as modelled, the broken ones as failed rows while the rest go on.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "flashbench/core/errors.hpp"
#include "flashbench/harness/plugins.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {
namespace {

// The one line a refused load says.
std::string load_error(const std::string& path) {
  try {
    load_plugin(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Plugin, WithoutTheEntryPointIsAOneLineUsageError) {
  const std::string error = load_error(FLASHBENCH_PLUGIN_NO_ENTRY);
  EXPECT_NE(error.find("no entry point flashbench_plugin()"), std::string::npos) << error;
  EXPECT_NE(error.find(FLASHBENCH_PLUGIN_NO_ENTRY), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(Plugin, OfAnotherAbiVersionIsAOneLineUsageError) {
  const std::string error = load_error(FLASHBENCH_PLUGIN_OTHER_ABI);
  EXPECT_NE(error.find("ABI version 2, this flashbench loads version 1"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(Plugin, AMissingFileIsAUsageError) {
  const std::string error = load_error("/nonexistent/libnothing.so");
  EXPECT_NE(error.find("cannot load it"), std::string::npos) << error;
}

TEST(Plugin, LoadedImplementationsJoinTheirDevice) {
  const PluginDescription plugin = load_plugin(FLASHBENCH_PLUGIN_NAIVE);
  EXPECT_EQ(plugin.name, "naive-cpu");
  EXPECT_EQ(plugin.abi_version, 1u);
  ASSERT_EQ(plugin.implementations.size(), 1u);
  EXPECT_EQ(plugin.implementations[0].name, "naive.c");
  EXPECT_EQ(plugin.implementations[0].device, "cpu");
  EXPECT_EQ(plugin.implementations[0].variant, Variant::v2);
  // Loading it again adds nothing: the name stays unique on the device.
  load_plugin(FLASHBENCH_PLUGIN_NAIVE);
  const auto all = registry().device("cpu").implementations();
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [](const auto& i) { return i->name() == "naive.c"; }), 1);
  const auto chosen = select_implementations(registry().device("cpu"), {"naive.c"});
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_TRUE(chosen[0]->foreign());
  EXPECT_EQ(chosen[0]->variant(), Variant::v2);
}

RunOptions quick() {
  RunOptions options;
  options.sampling.warmup = 0;
  options.sampling.warmup_ms = 0;
  options.sampling.min_samples = 5;
  options.sampling.max_samples = 5;
  return options;
}

// One row per name on the CPU, all on the same inputs.
std::vector<Row> run_on_cpu(const Problem& problem, const std::vector<std::string>& names) {
  const DeviceEntry& entry = registry().device("cpu");
  std::unique_ptr<Device> device = entry.open(DeviceOptions{.threads = 1});
  std::vector<std::unique_ptr<Implementation>> implementations = select_implementations(entry, names);
  std::vector<Implementation*> chosen;
  for (const auto& implementation : implementations) chosen.push_back(implementation.get());
  return Runner(*device, quick()).run(problem, chosen);
}

// The traps of the operator: GQA, N_k != N both ways with the causal mask (fully masked rows), an
// odd d.
std::vector<Problem> trap_problems() {
  std::vector<Problem> problems;
  problems.push_back(Problem{.batch = 2, .heads = 4, .seq = 33, .kv_heads = 2, .head_dim = 24, .causal = true});
  problems.push_back(Problem{.batch = 1, .heads = 2, .seq = 40, .seq_kv = 17, .head_dim = 7, .causal = true});
  problems.push_back(Problem{.batch = 1, .heads = 3, .seq = 1, .seq_kv = 29, .kv_heads = 1, .head_dim = 16});
  return problems;
}

TEST(Plugin, TheCpuExamplePassesItsCheckWithItsMemoryAsModelled) {
  load_plugin(FLASHBENCH_PLUGIN_NAIVE);
  for (const Problem& problem : trap_problems()) {
    const std::vector<Row> rows = run_on_cpu(problem, {"v2", "naive.c"});
    ASSERT_EQ(rows.size(), 2u);
    const Row& row = rows[1];
    ASSERT_EQ(row.status, Status::ok) << problem.describe() << ": " << row.reason;
    EXPECT_EQ(row.impl, "naive.c");
    ASSERT_TRUE(row.check) << problem.describe();
    EXPECT_TRUE(row.check->passed()) << problem.describe() << ": " << row.check->max_rel_err;
    // Every tensor compared: O, dQ, dK, dV.
    EXPECT_EQ(row.check->tensors.size(), 4u) << problem.describe();
    ASSERT_TRUE(row.model);
    EXPECT_EQ(row.measured.peak_bytes, row.model->peak_bytes) << problem.describe();
    EXPECT_EQ(row.measured.kept_bytes, row.model->kept_bytes) << problem.describe();
    EXPECT_EQ(row.measured.by_tag.bytes, row.model->by_tag.bytes) << problem.describe();
    // Its workspace went through the ledger (one row of scores forward, two rows backward).
    EXPECT_EQ(row.measured.high_water[Tag::workspace], 2 * problem.key_seq() * 4) << problem.describe();
    // The same computation as v2's up to rounding: the same inputs.
    EXPECT_EQ(row.reproducibility->inputs_hash, rows[0].reproducibility->inputs_hash);
  }
}

TEST(Plugin, WhatItDoesNotSupportIsSkippedWithItsReason) {
  load_plugin(FLASHBENCH_PLUGIN_NAIVE);
  const std::vector<Row> bf16 = run_on_cpu(Problem{.heads = 2, .seq = 16, .head_dim = 8, .dtype = Dtype::bf16}, {"naive.c"});
  EXPECT_EQ(bf16[0].status, Status::skipped);
  EXPECT_EQ(bf16[0].reason, "naive.c computes in fp32 storage only");
  const std::vector<Row> dropout = run_on_cpu(Problem{.heads = 2, .seq = 16, .dropout = 0.1, .head_dim = 8}, {"naive.c"});
  EXPECT_EQ(dropout[0].status, Status::skipped);
  EXPECT_NE(dropout[0].reason.find("no dropout mask"), std::string::npos) << dropout[0].reason;
}

TEST(Plugin, WrongNumbersAndErrorsAreFailedRowsAndTheSweepGoesOn) {
  load_plugin(FLASHBENCH_PLUGIN_NAIVE);
  load_plugin(FLASHBENCH_PLUGIN_BROKEN);
  const Problem problem{.batch = 1, .heads = 2, .seq = 32, .head_dim = 16};
  const std::vector<Row> rows = run_on_cpu(problem, {"broken.wrong", "broken.error", "naive.c"});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].status, Status::failed);
  // The failure names the tensor that is wrong, and only that one.
  EXPECT_EQ(rows[0].reason.rfind("dK differs from float64", 0), 0u) << rows[0].reason;
  EXPECT_EQ(rows[1].status, Status::failed);
  EXPECT_EQ(rows[1].reason,
            "plugin implementation broken.error: forward returned 7: broken.error refuses every call (a test of failed "
            "rows)");
  EXPECT_EQ(rows[2].status, Status::ok) << rows[2].reason;
  EXPECT_TRUE(rows[2].check && rows[2].check->passed());
}

TEST(Plugin, AnExceptionIsAFailedRowNamingIt) {
  load_plugin(FLASHBENCH_PLUGIN_NAIVE);
  load_plugin(FLASHBENCH_PLUGIN_THROWS);
  const std::vector<Row> rows = run_on_cpu(Problem{.heads = 2, .seq = 16, .head_dim = 8}, {"throws.cpp", "naive.c"});
  EXPECT_EQ(rows[0].status, Status::failed);
  EXPECT_EQ(rows[0].reason, "plugin implementation throws.cpp: forward threw: out of tiles");
  EXPECT_EQ(rows[1].status, Status::ok) << rows[1].reason;
}

TEST(Plugin, MemoryTakenAroundTheLedgerIsNamedOnTheRow) {
  load_plugin(FLASHBENCH_PLUGIN_NAIVE);
  load_plugin(FLASHBENCH_PLUGIN_BROKEN);
  const Problem problem{.batch = 1, .heads = 2, .seq = 32, .head_dim = 16};
  const std::vector<Row> rows = run_on_cpu(problem, {"naive.c", "broken.hidden"});
  if (!rows[1].measured.os_peak_bytes) GTEST_SKIP() << "this system does not let the resident set's peak be reset";
  EXPECT_EQ(rows[1].status, Status::ok) << rows[1].reason;
  const auto named = [](const Row& row) {
    return std::any_of(row.hazards.begin(), row.hazards.end(),
                       [](const std::string& h) { return h.rfind("untracked memory", 0) == 0; });
  };
  EXPECT_TRUE(named(rows[1])) << "outside view " << *rows[1].measured.os_peak_bytes << ", ledger "
                              << rows[1].measured.peak_bytes;
  EXPECT_FALSE(named(rows[0]));
}

}  // namespace
}  // namespace flashbench
