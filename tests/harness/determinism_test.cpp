// Reproducibility on the real devices, through the runner: the same --seed gives the same inputs
// (inputs_hash) and another seed other inputs; every row that ran says whether a second pass gave
// the same bits (deterministic), and a row that says so gives the same results_hash when the run is
// repeated; fp16 logits beyond its range are a named hazard, never hidden in a passed check. The
// CPU tests run everywhere; the CUDA ones skip where there is no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "flashbench/cuda/device.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"

namespace flashbench {
namespace {

RunOptions quick(uint64_t seed) {
  RunOptions options;
  options.seed = seed;
  options.sampling.warmup = 0;
  options.sampling.warmup_ms = 0;
  options.sampling.min_samples = 5;
  options.sampling.max_samples = 5;
  return options;
}

Problem small(Dtype dtype) {
  Problem p;
  p.batch = 1;
  p.heads = 2;
  p.seq = 67;  // more than one tile, not a multiple of any
  p.head_dim = 32;
  p.layers = 2;
  p.causal = true;
  p.dtype = dtype;
  return p;
}

// Every implementation of `backend` on `problem`.
std::vector<Row> run_all(const std::string& backend, const Problem& problem, const RunOptions& options) {
  const DeviceEntry& entry = registry().device(backend);
  std::unique_ptr<Device> device = entry.open(DeviceOptions{});
  std::vector<std::unique_ptr<Implementation>> implementations = entry.implementations();
  std::vector<Implementation*> chosen;
  for (const auto& implementation : implementations) chosen.push_back(implementation.get());
  return Runner(*device, options).run(problem, chosen);
}

// The same seed twice and another seed once, every implementation: inputs follow the seed; a row
// that calls itself deterministic repeats its results_hash in the second run.
void check_seed_and_determinism(const std::string& backend, const Problem& problem, bool expect_all_deterministic) {
  const std::vector<Row> first = run_all(backend, problem, quick(11));
  const std::vector<Row> again = run_all(backend, problem, quick(11));
  const std::vector<Row> other = run_all(backend, problem, quick(12));
  ASSERT_EQ(first.size(), again.size());
  int ran = 0;
  for (size_t k = 0; k < first.size(); ++k) {
    const Row& row = first[k];
    if (row.status == Status::skipped) continue;
    ++ran;
    EXPECT_EQ(row.status, Status::ok) << row.impl << ": " << row.reason;
    ASSERT_TRUE(row.reproducibility && again[k].reproducibility && other[k].reproducibility) << row.impl;
    const Reproducibility &a = *row.reproducibility, &b = *again[k].reproducibility, &c = *other[k].reproducibility;
    EXPECT_EQ(a.inputs_hash, b.inputs_hash) << row.impl << ": the same seed, other inputs";
    EXPECT_NE(a.inputs_hash, c.inputs_hash) << row.impl << ": another seed, the same inputs";
    EXPECT_EQ(a.inputs_hash, first[0].reproducibility->inputs_hash) << row.impl << ": implementations share inputs";
    ASSERT_TRUE(a.deterministic.has_value()) << row.impl;
    if (expect_all_deterministic) {
      EXPECT_TRUE(*a.deterministic) << row.impl;
    }
    if (*a.deterministic && b.deterministic.value_or(false)) {
      EXPECT_EQ(a.results_hash, b.results_hash) << row.impl << ": deterministic twice, yet other results";
    }
    EXPECT_NE(a.results_hash, c.results_hash) << row.impl << ": other inputs, the same results";
    std::printf("%s %s %s: deterministic %s\n", backend.c_str(), problem.describe().c_str(),
                row.impl.c_str(), *a.deterministic ? "yes" : "NO");
  }
  EXPECT_GT(ran, 0);
}

// scale 120, d = 32: a row of Q or K has norm ≈ 120 · sqrt(32) ≈ 680, so the bound on the logits
// from the inputs' norms, scale · max|q_i| · max|k_j| ≈ 1e5, is past 65504 (a logit q·k/sqrt(d) of
// independent rows is ≈ 1.4e4 · N(0, 1): it may reach that, it need not); the inputs themselves
// (|x| < 1000) stay well inside fp16.
void check_fp16_overflow_is_named(const std::string& backend, Problem problem) {
  problem.dtype = Dtype::fp16;
  problem.layers = 1;
  RunOptions options = quick(11);
  options.input_scale = 120;
  int ran = 0;
  const std::string expected = "fp16 overflow: the logits may reach |S| = ";
  for (const Row& row : run_all(backend, problem, options)) {
    if (row.status == Status::skipped) continue;
    ++ran;
    ASSERT_EQ(row.hazards.size(), 1u) << row.impl;
    EXPECT_EQ(row.hazards[0].find(expected), 0u) << row.hazards[0];
    // A check that took place had a finite bar: an overflowed naive computation sets none.
    if (row.check) {
      EXPECT_TRUE(std::isfinite(row.check->tolerance)) << row.impl;
    }
  }
  // The same inputs at bf16 (its range is fp32's) and at scale 1 name nothing.
  problem.dtype = Dtype::bf16;
  for (const Row& row : run_all(backend, problem, options)) EXPECT_TRUE(row.hazards.empty()) << row.impl;
  problem.dtype = Dtype::fp16;
  for (const Row& row : run_all(backend, problem, quick(11))) EXPECT_TRUE(row.hazards.empty()) << row.impl;
  EXPECT_GT(ran, 0) << "no implementation ran " << problem.describe();
}

// G = 1 < H and N_k ≠ N.
Problem with_gqa_and_unequal_lengths(Problem problem) {
  problem.kv_heads = 1;
  problem.seq_kv = 45;
  return problem;
}

TEST(Determinism, CpuSeedReproducesInputsAndEveryKernelRepeatsItsBits) {
  for (Dtype dtype : {Dtype::fp32, Dtype::bf16}) check_seed_and_determinism("cpu", small(dtype), true);
}

// G < H, N_k ≠ N with dropout: K and V are inputs of the hash and dK, dV results, and the dropout
// masks, keyed by the seed, repeat in the second pass.
TEST(Determinism, CpuGqaUnequalLengthsWithDropoutRepeatsItsBits) {
  Problem problem = small(Dtype::fp32);
  problem.kv_heads = 1;
  problem.seq_kv = 45;
  problem.dropout = 0.1;
  check_seed_and_determinism("cpu", problem, true);
}

TEST(Determinism, CpuFp16OverflowOfTheLogitsIsNamed) { check_fp16_overflow_is_named("cpu", small(Dtype::fp16)); }

TEST(Determinism, CudaSeedReproducesInputsAndRowsSayWhetherBitsRepeat) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (Dtype dtype : {Dtype::fp32, Dtype::bf16, Dtype::fp16}) check_seed_and_determinism("cuda", small(dtype), false);
}

TEST(Determinism, CudaFp16OverflowOfTheLogitsIsNamed) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_fp16_overflow_is_named("cuda", small(Dtype::fp16));
}

// The CPU keeps 16-bit storage to N = N_k and G = H for now (other problems are skipped there): on
// CUDA.
TEST(Determinism, CudaFp16OverflowWithGqaAndUnequalLengthsIsNamed) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_fp16_overflow_is_named("cuda", with_gqa_and_unequal_lengths(small(Dtype::fp16)));
}

}  // namespace
}  // namespace flashbench
