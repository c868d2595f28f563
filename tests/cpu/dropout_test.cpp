// Dropout: the Philox 4x32-10 generator against the Random123 known-answer vectors, the keep rate of
// 10^7 draws, the mask v2 regenerates in backward against the one its forward drew (bit for bit),
// v2's gradients against standard's on the same mask, and every variant against the float64
// reference with dropout, unequal lengths, GQA and the causal mask.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "flashbench/core/philox.hpp"
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

// The three philox4x32 10-round lines of Random123's kat_vectors: counter, key, expected output.
TEST(Philox, Random123KnownAnswers) {
  struct Vector {
    philox::Block counter;
    uint32_t key0, key1;
    philox::Block expected;
  };
  const Vector vectors[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Vector& v : vectors) {
    const philox::Block got = philox::philox4x32_10(v.counter, v.key0, v.key1);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(got.word[w], v.expected.word[w]) << "word " << w;
  }
}

// 10^7 elements kept with probability 1 − p: the count lies within 4 standard deviations of
// n·(1 − p) (a binomial's σ = sqrt(n·p·(1 − p))).
TEST(Philox, KeepRateOfTenMillionDraws) {
  constexpr int64_t kDraws = 10'000'000;
  for (double p : {0.1, 0.5, 0.9}) {
    const philox::DropoutMask mask = philox::make_dropout_mask(p, 0x5eed, 3);
    int64_t kept = 0;
#pragma omp parallel for reduction(+ : kept) schedule(static)
    for (int64_t block = 0; block < kDraws / 4; ++block) {
      const philox::Block words = mask.block(uint64_t(block) * 4);
      for (uint32_t word : words.word) kept += word >= mask.threshold;
    }
    const double expected = kDraws * (1 - p), sigma = std::sqrt(kDraws * p * (1 - p));
    EXPECT_LE(std::abs(double(kept) - expected), 4 * sigma) << "p = " << p << ": kept " << kept;
  }
}

// The run of factors the kernels take equals element-by-element draws, from any start (blocks of
// four are shared by neighbours), and another seed or offset gives another mask.
TEST(Philox, FactorRunsEqualSingleDraws) {
  const philox::DropoutMask mask = philox::make_dropout_mask(0.3, 42, 7);
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{6}, uint64_t{1} << 40}) {
    float run[37];
    mask.factors(first, 37, run);
    for (int k = 0; k < 37; ++k) ASSERT_EQ(run[k], mask.factor(first + k)) << first << "+" << k;
  }
  const philox::DropoutMask other_seed = philox::make_dropout_mask(0.3, 43, 7);
  const philox::DropoutMask other_offset = philox::make_dropout_mask(0.3, 42, 8);
  int differ_seed = 0, differ_offset = 0;
  for (uint64_t e = 0; e < 1000; ++e) {
    differ_seed += mask.keeps(e) != other_seed.keeps(e);
    differ_offset += mask.keeps(e) != other_offset.keeps(e);
  }
  EXPECT_GT(differ_seed, 300);  // independent masks differ in 2·0.3·0.7 = 42 % of the elements
  EXPECT_GT(differ_offset, 300);
}

struct LayerResult {
  std::vector<float> O, dQ, dK, dV;
  std::vector<uint8_t> mask = {};  // standard's kept Z, when it keeps one
};

// One layer through the CPU kernels: Q [BH,N,d], K, V [BH/r,Nk,d], dropout p with seed and offset.
LayerResult run_layer(Variant variant, const Problem& problem, uint64_t seed, uint64_t offset,
                      const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V,
                      const std::vector<float>& dO) {
  MemoryLedger ledger;
  HostSpace allocator(ledger);
  cpu::LayerShape shape = cpu::LayerShape::of(problem);
  shape.dropout = philox::make_dropout_mask(problem.dropout, seed, offset);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  LayerResult r{std::vector<float>(Q.size(), nan), std::vector<float>(Q.size(), nan), std::vector<float>(K.size(), nan),
                std::vector<float>(K.size(), nan)};
  {
    const KeptTensors kept = allocate_kept(variant, problem, allocator);
    const cpu::KeptView view = cpu::kept_view(variant, problem, kept);
    cpu::forward(variant, shape, {}, Q.data(), K.data(), V.data(), r.O.data(), view, allocator);
    if (view.mask) r.mask.assign(view.mask, view.mask + problem.score_elements());
    cpu::backward(variant, shape, {}, Q.data(), K.data(), V.data(), r.O.data(), dO.data(), view, r.dQ.data(),
                  r.dK.data(), r.dV.data(), allocator);
  }
  EXPECT_EQ(ledger.live().total(), 0);
  return r;
}

Problem layer_problem(int64_t H, int64_t G, int64_t N, int64_t Nk, int64_t d, bool causal, double p) {
  Problem problem;
  problem.heads = H;
  problem.kv_heads = G;
  problem.seq = N;
  problem.seq_kv = Nk;
  problem.head_dim = d;
  problem.causal = causal;
  problem.dropout = p;
  return problem;
}

// v2 keeps no mask: its forward draws Z for O = P̃·V and its backward draws it again for dV = P̃ᵀ·dO
// and dP. With V = I (N_k = d) the forward's O is P̃ itself, and with dO = I (N = d) the backward's
// dV is P̃ᵀ: their zeros are the two masks, which must agree element for element — and agree with
// the mask standard keeps and with the generator.
TEST(DropoutMask, ForwardAndBackwardMasksAgreeBitForBit) {
  const int64_t n = 16;
  const Problem problem = layer_problem(2, 2, n, n, n, false, 0.4);
  const auto Q = testing::random_normal(problem.q_elements(), 101), K = testing::random_normal(problem.kv_elements(), 102);
  std::vector<float> identity(problem.kv_elements(), 0.0f);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < n; ++i) identity[(h * n + i) * n + i] = 1.0f;
  const philox::DropoutMask generator = philox::make_dropout_mask(0.4, 77, 5);
  const LayerResult v2 = run_layer(Variant::v2, problem, 77, 5, Q, K, identity, identity);
  const LayerResult standard = run_layer(Variant::standard, problem, 77, 5, Q, K, identity, identity);
  int64_t dropped = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t e = (h * n + i) * n + j;
        const bool forward_keeps = v2.O[e] != 0.0f;                        // O[h, i, j] = P̃_ij
        const bool backward_keeps = v2.dV[(h * n + j) * n + i] != 0.0f;     // dV[h, j, i] = P̃_ij
        ASSERT_EQ(forward_keeps, backward_keeps) << "h " << h << " i " << i << " j " << j;
        ASSERT_EQ(forward_keeps, standard.mask[e] == 1) << "h " << h << " i " << i << " j " << j;
        ASSERT_EQ(forward_keeps, generator.keeps(uint64_t(e)));
        dropped += !forward_keeps;
      }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 2 * n * n);
}

// v2 (mask regenerated) and standard (mask kept) on the same mask give the same gradients; every
// variant matches the float64 reference with dropout (which draws the mask from the same generator
// but shares no kernel code), with N_k ≠ N both ways, GQA, MQA and the bottom-right causal mask.
TEST(DropoutLayer, EveryVariantMatchesFloat64AndStandard) {
  // N_k = 300 spans three column tiles of v1's forward (Bc = 128): a mask drawn at the wrong column
  // of a later tile shows there.
  for (const Problem& problem : {layer_problem(4, 2, 37, 70, 24, true, 0.2), layer_problem(4, 1, 70, 37, 24, true, 0.5),
                                 layer_problem(2, 2, 45, 45, 16, false, 0.1), layer_problem(2, 1, 40, 300, 16, true, 0.3)}) {
    const auto Q = testing::random_normal(problem.q_elements(), 111),
               K = testing::random_normal(problem.kv_elements(), 112),
               V = testing::random_normal(problem.kv_elements(), 113),
               dO = testing::random_normal(problem.q_elements(), 114);
    ReferenceShape shape{problem.heads, problem.seq, problem.head_dim, problem.causal, problem.key_seq(),
                         problem.group_size()};
    shape.dropout = problem.dropout;
    shape.dropout_seed = 9;
    shape.dropout_offset = 4;
    const LayerReference want = reference_layer(shape, testing::to_double(Q), testing::to_double(K),
                                                testing::to_double(V), testing::to_double(dO));
    const LayerResult standard = run_layer(Variant::standard, problem, 9, 4, Q, K, V, dO);
    for (Variant variant : kAllVariants) {
      const LayerResult got = run_layer(variant, problem, 9, 4, Q, K, V, dO);
      const std::string where = std::string(to_string(variant)) + " " + problem.describe();
      EXPECT_LE(testing::normwise_error(got.O, want.O), 1e-5) << where;
      EXPECT_LE(testing::normwise_error(got.dQ, want.dQ), 1e-5) << where;
      EXPECT_LE(testing::normwise_error(got.dK, want.dK), 1e-5) << where;
      EXPECT_LE(testing::normwise_error(got.dV, want.dV), 1e-5) << where;
      for (const auto& [mine, theirs] : {std::pair{&got.dQ, &standard.dQ}, std::pair{&got.dK, &standard.dK},
                                         std::pair{&got.dV, &standard.dV}})
        EXPECT_LE(testing::normwise_error(*mine, testing::to_double(*theirs)), 1e-5) << where << " against standard";
    }
    // Dropout changed the result: without it the reference differs by far more than the tolerance.
    ReferenceShape without = shape;
    without.dropout = 0;
    const LayerReference plain = reference_layer(without, testing::to_double(Q), testing::to_double(K),
                                                 testing::to_double(V), testing::to_double(dO));
    EXPECT_GT(testing::normwise_error(testing::to_float(plain.O), want.O), 1e-2);
  }
}

// The stack through the runner with dropout (each layer its own mask): every row checked against
// the float64 reference and passing, self-attention and with a context.
TEST(DropoutStack, RunnerChecksEveryRow) {
  const DeviceEntry& entry = registry().device("cpu");
  std::unique_ptr<Device> device = entry.open({});
  RunOptions options = testing::one_sample_options();
  for (const auto& [G, Nk] : {std::pair{int64_t{4}, int64_t{0}}, std::pair{int64_t{2}, int64_t{53}}}) {
    Problem p = layer_problem(4, G, 41, Nk, 16, true, 0.25);
    p.layers = 2;
    auto implementations = select_implementations(entry, {"standard", "v1", "v2", "checkpoint", "v2.split"});
    std::vector<Implementation*> pointers;
    for (auto& implementation : implementations) pointers.push_back(implementation.get());
    Runner runner(*device, options);
    for (const Row& row : runner.run(p, pointers)) {
      ASSERT_EQ(row.status, Status::ok) << row.impl << ": " << row.reason;
      ASSERT_TRUE(row.check.has_value()) << row.impl;
      EXPECT_TRUE(row.check->passed()) << row.impl << " " << p.describe() << " " << row.check->max_rel_err;
    }
  }
}

}  // namespace
}  // namespace flashbench
