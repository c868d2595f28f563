// Running out of memory is a result: a limit below what standard needs turns its row into `oom`
// (the ledger refuses the allocation before the system is asked), and the other variants still run.
#include <gtest/gtest.h>

#include "flashbench/backend.hpp"

namespace flashbench {
namespace {

TEST(MemoryLimit, StandardIsAnOomRowAndV2StillRuns) {
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
  const std::vector<Row> rows = make_cpu_backend()->run(problem, variants, options);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, Status::oom);
  EXPECT_NE(rows[0].reason.find("limit"), std::string::npos) << rows[0].reason;
  EXPECT_EQ(rows[1].status, Status::ok) << rows[1].reason;
  EXPECT_LE(rows[1].measured.peak_bytes, options.mem_limit_bytes);
  EXPECT_GE(rows[1].bwd.count(), 5);
}

}  // namespace
}  // namespace flashbench
