// Not fitting is a result: a limit below what standard needs turns its row into `skipped` with the
// model's numbers before anything is allocated (the pre-flight), and the other variants still run
// within the limit. (An allocation that fails anyway is an `oom` row: runner_test.cpp.)
#include <gtest/gtest.h>

#include "support/cpu.hpp"

namespace flashbench {
namespace {

TEST(MemoryLimit, StandardIsSkippedAndV2StillRuns) {
  Problem problem;
  problem.heads = 2;
  problem.seq = 1024;
  problem.head_dim = 32;
  RunOptions options;
  options.sampling.warmup = 0;
  options.sampling.min_samples = 5;
  options.sampling.max_time_s = 0.05;
  options.mem_limit_bytes = int64_t{4} << 20;  // standard's P alone is 8 MiB; v2 needs well under 4
  const Variant variants[] = {Variant::standard, Variant::v2};
  const std::vector<Row> rows = testing::run_cpu(problem, variants, options);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, Status::skipped);
  EXPECT_NE(rows[0].reason.find("needs"), std::string::npos) << rows[0].reason;
  ASSERT_TRUE(rows[0].model.has_value());
  EXPECT_GT(rows[0].model->peak_bytes, options.mem_limit_bytes);
  EXPECT_EQ(rows[1].status, Status::ok) << rows[1].reason;
  EXPECT_LE(rows[1].measured.peak_bytes, options.mem_limit_bytes);
  EXPECT_GE(rows[1].bwd.count(), 5);
}

}  // namespace
}  // namespace flashbench
