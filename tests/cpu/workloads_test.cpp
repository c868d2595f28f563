// The workloads beyond square self-attention (docs/workloads.md) against the float64 reference:
// N_k ≠ N both ways with the bottom-right causal mask (rows that see nothing give O = 0), GQA and MQA
// (dK, dV summed over the query heads sharing a K/V head), the stack attending to a context C with
// native and repeated (expand_kv) K/V, and the model against the measured ledger for them.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "flashbench/cpu/attention.hpp"
#include "flashbench/cpu/kept.hpp"
#include "flashbench/harness/reference.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/harness/stack.hpp"
#include "support/cpu.hpp"
#include "support/reference.hpp"

namespace flashbench {
namespace {

// One layer's extents: BH query heads, r query heads per K/V head, N query rows, Nk key rows.
struct LayerCase {
  int64_t BH, r, N, Nk, d;
  bool causal;
};

std::string describe(const LayerCase& c) {
  return "BH=" + std::to_string(c.BH) + " r=" + std::to_string(c.r) + " N=" + std::to_string(c.N) +
         " Nk=" + std::to_string(c.Nk) + " d=" + std::to_string(c.d) + (c.causal ? " causal" : "");
}

Problem problem_of(const LayerCase& c) {
  Problem p;
  p.batch = 1;
  p.heads = c.BH;
  p.kv_heads = c.BH / c.r;
  p.seq = c.N;
  p.seq_kv = c.Nk;
  p.head_dim = c.d;
  p.causal = c.causal;
  return p;
}

struct LayerResult {
  std::vector<float> O, dQ, dK, dV;
};

// One layer through the CPU kernels, Q [BH,N,d], K, V [BH/r,Nk,d], on a fresh ledger.
LayerResult run_layer(Variant variant, const LayerCase& c, const std::vector<float>& Q, const std::vector<float>& K,
                      const std::vector<float>& V, const std::vector<float>& dO, const cpu::Tiling& tiling = {}) {
  MemoryLedger ledger;
  HostSpace allocator(ledger);
  const Problem problem = problem_of(c);
  const cpu::LayerShape shape = cpu::LayerShape::of(problem);
  const float nan = std::numeric_limits<float>::quiet_NaN();  // a skipped first write shows
  LayerResult r{std::vector<float>(Q.size(), nan), std::vector<float>(Q.size(), nan), std::vector<float>(K.size(), nan),
                std::vector<float>(K.size(), nan)};
  {
    const KeptTensors kept = allocate_kept(variant, problem, allocator);
    const cpu::KeptView view = cpu::kept_view(variant, problem, kept);
    cpu::forward(variant, shape, tiling, Q.data(), K.data(), V.data(), r.O.data(), view, allocator);
    cpu::backward(variant, shape, tiling, Q.data(), K.data(), V.data(), r.O.data(), dO.data(), view, r.dQ.data(),
                  r.dK.data(), r.dV.data(), allocator);
  }
  EXPECT_EQ(ledger.live().total(), 0) << "the kernels must release all their workspace";
  return r;
}

LayerReference reference_of(const LayerCase& c, const std::vector<float>& Q, const std::vector<float>& K,
                            const std::vector<float>& V, const std::vector<float>& dO) {
  const ReferenceShape shape{c.BH, c.N, c.d, c.causal, c.Nk, c.r};
  return reference_layer(shape, testing::to_double(Q), testing::to_double(K), testing::to_double(V),
                         testing::to_double(dO));
}

void expect_layer_matches(Variant variant, const LayerCase& c, const cpu::Tiling& tiling, int threads) {
  const int64_t q = c.BH * c.N * c.d, kv = c.BH / c.r * c.Nk * c.d;
  const auto Q = testing::random_normal(q, 61), K = testing::random_normal(kv, 62), V = testing::random_normal(kv, 63),
             dO = testing::random_normal(q, 64);
  const LayerReference want = reference_of(c, Q, K, V, dO);
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(threads);
  const LayerResult got = run_layer(variant, c, Q, K, V, dO, tiling);
  omp_set_num_threads(threads_before);
  const std::string where = std::string(to_string(variant)) + " " + describe(c) + " T=" + std::to_string(threads) +
                            " Br=" + std::to_string(tiling.row_block) + " Bc=" + std::to_string(tiling.col_block);
  constexpr double kTolerance = 1e-5;  // fp32 against float64, norm-wise
  EXPECT_LE(testing::normwise_error(got.O, want.O), kTolerance) << where;
  EXPECT_LE(testing::normwise_error(got.dQ, want.dQ), kTolerance) << where;
  EXPECT_LE(testing::normwise_error(got.dK, want.dK), kTolerance) << where;
  EXPECT_LE(testing::normwise_error(got.dV, want.dV), kTolerance) << where;
}

// N_k ≠ N both ways, odd lengths, several blocks and a one-row remainder, r = 1 (MHA), r = 2 and
// r = BH (MQA); 2 threads take v2's whole-head backward where there are ≥ 2 K/V heads, 3 threads its
// split path.
TEST(UnequalLengthsAndGqa, EveryVariantMatchesFloat64) {
  const std::vector<LayerCase> cases = {
      {2, 1, 37, 150, 24, false}, {2, 1, 37, 150, 24, true},  // N < N_k: every row sees columns
      {2, 1, 150, 37, 24, false}, {2, 1, 150, 37, 24, true},  // N > N_k: the first 113 rows see nothing
      {4, 2, 67, 131, 40, true},  {4, 4, 131, 67, 40, true},  // GQA, MQA; d not a multiple of 16
      {6, 3, 45, 45, 16, true},   {3, 3, 1, 9, 8, true},      // N = N_k with G < H; N = 1 sees the last row
      {2, 2, 9, 1, 8, true},                                  // N_k = 1: only the last row sees it
  };
  for (Variant variant : kAllVariants)
    for (const LayerCase& c : cases)
      for (int threads : {2, 3}) expect_layer_matches(variant, c, cpu::Tiling{}, threads);
}

// The common head dims (32, 64, 96, 128, 192, 256) and odd ones (1, 33, 97) through every variant:
// the kernels' tiles are over rows and columns, d is the inner extent of every product, so any d runs.
TEST(UnequalLengthsAndGqa, EveryHeadDimMatchesFloat64) {
  for (int64_t d : {1, 32, 33, 64, 96, 97, 128, 192, 256})
    for (Variant variant : kAllVariants) expect_layer_matches(variant, {4, 2, 19, 41, d, true}, cpu::Tiling{}, 2);
}

// v2's pieces under the bottom-right mask with tiles that divide nothing: a piece covered twice or
// missed shows in O or a gradient.
TEST(UnequalLengthsAndGqa, V2TilingsMatchFloat64) {
  const std::vector<cpu::Tiling> tilings = {{48, 40, 16}, {7, 5, 16}, {33, 300, 48}, {16, 16, 16}};
  for (const LayerCase& c : {LayerCase{4, 2, 103, 211, 24, true}, LayerCase{4, 2, 211, 103, 24, true},
                             LayerCase{2, 2, 77, 130, 24, false}})
    for (const cpu::Tiling& t : tilings)
      for (int threads : {1, 3}) expect_layer_matches(Variant::v2, c, t, threads);
}

// Under the bottom-right mask with N > N_k the first N − N_k rows see nothing: their output and dQ
// are exactly zero, not NaN.
TEST(UnequalLengthsAndGqa, FullyMaskedRowsAreZero) {
  const LayerCase c{2, 1, 20, 5, 8, true};
  const auto Q = testing::random_normal(c.BH * c.N * c.d, 71), K = testing::random_normal(c.BH * c.Nk * c.d, 72),
             dO = testing::random_normal(c.BH * c.N * c.d, 73);
  for (Variant variant : kAllVariants) {
    const LayerResult got = run_layer(variant, c, Q, K, K, dO);
    for (int64_t h = 0; h < c.BH; ++h)
      for (int64_t i = 0; i < c.N - c.Nk; ++i)
        for (int64_t k = 0; k < c.d; ++k) {
          const int64_t e = (h * c.N + i) * c.d + k;
          ASSERT_EQ(got.O[e], 0.0f) << to_string(variant) << " row " << i;
          ASSERT_EQ(got.dQ[e], 0.0f) << to_string(variant) << " row " << i;
        }
  }
}

// The reference itself: bottom-right causal with N_k ≥ N equals the plain causal mask on the last N
// rows of a square problem whose queries are those rows (the prefix-cache reading of the mask).
TEST(UnequalLengthsAndGqa, BottomRightMaskIsTheLastRowsOfTheSquareMask) {
  const int64_t N = 5, Nk = 12, d = 8;
  const auto Kf = testing::random_normal(Nk * d, 81), Qtail = testing::random_normal(N * d, 82);
  std::vector<float> Qfull = testing::random_normal(Nk * d, 83);
  std::copy(Qtail.begin(), Qtail.end(), Qfull.begin() + (Nk - N) * d);
  const std::vector<double> zeros_short(N * d, 0.0), zeros_full(Nk * d, 0.0);
  const LayerReference tail = reference_layer({1, N, d, true, Nk, 1}, testing::to_double(Qtail), testing::to_double(Kf),
                                              testing::to_double(Kf), zeros_short);
  const LayerReference full = reference_layer({1, Nk, d, true, Nk, 1}, testing::to_double(Qfull),
                                              testing::to_double(Kf), testing::to_double(Kf), zeros_full);
  for (int64_t e = 0; e < N * d; ++e) EXPECT_NEAR(tail.O[e], full.O[(Nk - N) * d + e], 1e-12);
}

// ---- whole layers through the harness: GQA and N_k ≠ N ----

TEST(UnequalLengthsAndGqa, NativeAndRepeatedMatchFloat64ThroughTheHarness) {
  const DeviceEntry& entry = registry().device("cpu");
  std::unique_ptr<Device> device = entry.open({});
  for (const auto& [G, N, Nk] : {std::tuple{1, 29, 41}, std::tuple{2, 41, 29}, std::tuple{4, 33, 33}})
    for (bool causal : {false, true}) {
      Problem p;
      p.batch = 2;
      p.heads = 4;
      p.kv_heads = G;
      p.seq = N;
      p.seq_kv = Nk;
      p.head_dim = 16;
      p.causal = causal;
      const auto Q = testing::random_normal(p.q_elements(), 91), K = testing::random_normal(p.kv_elements(), 92),
                 V = testing::random_normal(p.kv_elements(), 93), dO = testing::random_normal(p.q_elements(), 94);
      const LayerReference want =
          reference_layer({p.heads_total(), p.seq, p.head_dim, causal, p.key_seq(), p.group_size()},
                          testing::to_double(Q), testing::to_double(K), testing::to_double(V), testing::to_double(dO));
      for (bool expand : {false, true})
        for (Variant variant : kAllVariants) {
          Problem q = p;
          q.expand_kv = expand;
          auto implementations = select_implementations(entry, {std::string(to_string(variant))});
          const Runner::Pass got = Runner(*device, RunOptions{}).run_once(q, *implementations.front(), {Q, K, V, dO});
          const std::string where = std::string(to_string(variant)) + " " + q.describe();
          ASSERT_EQ(got.dK.size(), size_t(p.kv_elements())) << where;
          EXPECT_LE(testing::normwise_error(got.O, want.O), 1e-5) << where;
          EXPECT_LE(testing::normwise_error(got.dQ, want.dQ), 1e-5) << where;
          EXPECT_LE(testing::normwise_error(got.dK, want.dK), 1e-5) << where;
          EXPECT_LE(testing::normwise_error(got.dV, want.dV), 1e-5) << where;
        }
    }
}

// Through the runner: every row checked against the float64 reference, O, dQ, dK, dV apart, and
// passing.
TEST(UnequalLengthsAndGqa, RunnerChecksEveryTensorOfEveryRow) {
  Problem p;
  p.batch = 1;
  p.heads = 4;
  p.kv_heads = 2;
  p.seq = 45;
  p.seq_kv = 70;
  p.head_dim = 16;
  p.layers = 2;
  p.causal = true;
  const DeviceEntry& entry = registry().device("cpu");
  std::unique_ptr<Device> device = entry.open({});
  RunOptions options = testing::one_sample_options();
  for (bool expand : {false, true}) {
    p.expand_kv = expand;
    auto implementations = select_implementations(entry, {"standard", "v1", "v2", "checkpoint", "v2.split"});
    std::vector<Implementation*> pointers;
    for (auto& implementation : implementations) pointers.push_back(implementation.get());
    Runner runner(*device, options);
    for (const Row& row : runner.run(p, pointers)) {
      ASSERT_EQ(row.status, Status::ok) << row.impl << ": " << row.reason;
      ASSERT_TRUE(row.check.has_value()) << row.impl;
      EXPECT_TRUE(row.check->passed()) << row.impl << " " << row.check->max_rel_err;
      EXPECT_GT(row.check->max_rel_err, 0.0) << row.impl;
      // O, dQ, dK and dV each compared, the row's error the largest of them.
      ASSERT_EQ(row.check->tensors.size(), 4u) << row.impl;
      EXPECT_EQ(row.check->tensors[2].name, "dK") << row.impl;
      EXPECT_EQ(row.check->tensors[3].name, "dV") << row.impl;
      EXPECT_TRUE(row.check->not_compared.empty()) << row.impl << ": " << row.check->not_compared;
      double largest = 0;
      for (const CheckedTensor& tensor : row.check->tensors) {
        EXPECT_TRUE(tensor.naive_rel_err.has_value()) << row.impl << " " << tensor.name;
        largest = std::max(largest, tensor.rel_err);
      }
      EXPECT_EQ(largest, row.check->max_rel_err) << row.impl;
    }
  }
}

}  // namespace
}  // namespace flashbench
