// cpu::gemm against the double-accumulating gemm_reference: every Op combination, shapes that are
// not multiples of the register tile or the cache blocks, leading dimensions wider than the operand,
// alpha and beta cases, and the untouched memory around C; on every ISA's kernels this CPU can run
// (cpu/isa.hpp: cpu::gemm calls the active one), the others skipped by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "flashbench/cpu/gemm.hpp"
#include "flashbench/cpu/isa.hpp"
#include "support/isa.hpp"

namespace flashbench::cpu {
namespace {

struct Shape {
  int64_t M, N, K;
};

// A [rows, cols] row-major matrix with `pad` unused floats after each row (leading dim = cols + pad).
struct Matrix {
  int64_t rows, cols, ld;
  std::vector<float> data;
  Matrix(int64_t rows_, int64_t cols_, int64_t pad, std::mt19937& rng)
      : rows(rows_), cols(cols_), ld(cols_ + pad), data(size_t(rows_ * (cols_ + pad))) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& x : data) x = uniform(rng);
  }
};

void expect_matches_reference(Op op_a, Op op_b, Shape s, float alpha, float beta, int64_t pad) {
  std::mt19937 rng(uint32_t(s.M * 7919 + s.N * 104729 + s.K * 31 + int(op_a) * 2 + int(op_b) + pad));
  const Matrix A = op_a == Op::none ? Matrix(s.M, s.K, pad, rng) : Matrix(s.K, s.M, pad, rng);
  const Matrix B = op_b == Op::none ? Matrix(s.K, s.N, pad, rng) : Matrix(s.N, s.K, pad, rng);
  const Matrix C0(s.M, s.N, pad, rng);  // its padding must survive untouched
  std::vector<float> C = C0.data, C_ref = C0.data;
  gemm(op_a, op_b, s.M, s.N, s.K, alpha, A.data.data(), A.ld, B.data.data(), B.ld, beta, C.data(), C0.ld);
  gemm_reference(op_a, op_b, s.M, s.N, s.K, alpha, A.data.data(), A.ld, B.data.data(), B.ld, beta,
                 C_ref.data(), C0.ld);
  // fp32 accumulation of K products of magnitude ≤ 1: error grows like sqrt(K)·eps, bounded by K·eps.
  const double tolerance = 4.0 * double(s.K + 1) * 1.2e-7 * (std::abs(alpha) + std::abs(beta) + 1.0);
  for (int64_t i = 0; i < s.M; ++i) {
    for (int64_t j = 0; j < C0.ld; ++j) {
      const size_t at = size_t(i * C0.ld + j);
      if (j >= s.N) {
        ASSERT_EQ(C[at], C0.data[at]) << "padding of C written at (" << i << "," << j << ")";
        continue;
      }
      ASSERT_NEAR(C[at], C_ref[at], tolerance)
          << "op_a=" << int(op_a) << " op_b=" << int(op_b) << " M=" << s.M << " N=" << s.N << " K=" << s.K
          << " alpha=" << alpha << " beta=" << beta << " at (" << i << "," << j << ")";
    }
  }
}

constexpr Op kOps[] = {Op::none, Op::transpose};

class Gemm : public testing::EveryIsa {};

TEST_P(Gemm, OddShapesAllOpCombinations) {
  const Shape shapes[] = {{1, 1, 1},    {1, 17, 3},   {13, 1, 5},    {7, 33, 9},   {12, 32, 64},
                          {23, 31, 29}, {64, 128, 64}, {65, 129, 63}, {37, 100, 1}, {11, 48, 130}};
  for (Op op_a : kOps)
    for (Op op_b : kOps)
      for (const Shape& s : shapes) expect_matches_reference(op_a, op_b, s, 1.0f, 0.0f, 0);
}

TEST_P(Gemm, LeadingDimensionsWiderThanTheOperand) {
  for (Op op_a : kOps)
    for (Op op_b : kOps)
      for (int64_t pad : {1, 5, 16}) expect_matches_reference(op_a, op_b, {29, 45, 70}, 1.0f, 0.0f, pad);
}

// Column counts that end a register tile after 8 and after 25 of its 32 columns.
TEST_P(Gemm, AlphaAndBeta) {
  for (Op op_a : kOps)
    for (Op op_b : kOps)
      for (int64_t n : {40, 57}) {
        expect_matches_reference(op_a, op_b, {19, n, 33}, 0.125f, 1.0f, 3);
        expect_matches_reference(op_a, op_b, {19, n, 33}, -2.0f, 0.5f, 0);
        expect_matches_reference(op_a, op_b, {19, n, 33}, 1.0f, -1.0f, 0);
      }
}

// Shapes beyond one cache block in every dimension take the packed path, with K split in blocks.
TEST_P(Gemm, LargeShapesCrossCacheBlocks) {
  for (Op op_a : kOps)
    for (Op op_b : kOps) expect_matches_reference(op_a, op_b, {131, 1041, 300}, 1.0f, 0.5f, 7);
}

// Long-K products with few rows, as standard's backward runs them (dV = Pᵀ·dO: 128 × d × N): the row
// blocks are balanced (127 rows as two blocks, the second ending in a strip of one row) and a
// transposed A is packed with whole-vector stores that spill into the next k's slots; every strip
// height and the last k of each strip are covered by these shapes.
TEST_P(Gemm, LongInnerDimensionFewRows) {
  for (Op op_a : kOps)
    for (Op op_b : kOps)
      for (Shape shape : {Shape{127, 67, 1031}, Shape{128, 64, 2048}, Shape{601, 40, 517}, Shape{5, 3, 700}})
        expect_matches_reference(op_a, op_b, shape, 1.0f, 0.0f, 3);
}

TEST_P(Gemm, ZeroInnerDimensionScalesC) {
  std::vector<float> C = {1.0f, 2.0f, 3.0f, 4.0f};
  gemm(Op::none, Op::none, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, Gemm, ::testing::ValuesIn(kAllIsas), testing::isa_test_name);

}  // namespace
}  // namespace flashbench::cpu
