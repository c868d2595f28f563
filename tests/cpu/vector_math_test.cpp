// The vectorised exp against double-precision std::exp over the whole fp32 domain the softmax can
// feed it (scores minus their row maximum are ≤ 0, down to -inf for masked entries), and the row
// helpers against plain loops, including lengths that end inside a vector: on every ISA's kernels
// this CPU can run (cpu/isa.hpp; the others are skipped, by name).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "flashbench/cpu/isa_kernels.hpp"
#include "support/isa.hpp"

namespace flashbench::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

class VectorMath : public testing::EveryIsa {
 protected:
  const IsaKernels& kernels() const { return isa_kernels(GetParam()); }
  std::vector<float> exp_of(const std::vector<float>& x) const {
    std::vector<float> y(x.size());
    kernels().exp_array(x.data(), y.data(), int64_t(x.size()));
    return y;
  }
};

// The bound documented in vector_math.hpp: relative 2.5e-7 from kExpFlushBelow up, and below it
// exactly 0, which is within 2⁻¹²⁴ of the true value.
void expect_within_bound(float x, float got, float flush_below) {
  const double want = std::exp(double(x));
  if (x < flush_below) {
    ASSERT_EQ(got, 0.0f) << "x=" << x;
    ASSERT_LT(want, std::ldexp(1.0, -124)) << "x=" << x;
  } else if (want >= double(FLT_MIN)) {
    ASSERT_LE(std::abs(double(got) - want) / want, 2.5e-7) << "x=" << x << " got " << got << " want " << want;
  } else {
    ASSERT_LE(std::abs(double(got) - want), double(FLT_MIN)) << "x=" << x;
  }
}

TEST_P(VectorMath, ExpWithinTheDocumentedBoundFromMinus104To88) {
  std::vector<float> x;
  for (double v = -104.0; v <= 88.7; v += 1.0 / 1024) x.push_back(float(v));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> softmax_range(-30.0f, 0.0f);
  for (int i = 0; i < 100000; ++i) x.push_back(softmax_range(rng));
  const std::vector<float> y = exp_of(x);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    expect_within_bound(x[i], y[i], kernels().exp_flush_below);
    const double want = std::exp(double(x[i]));
    if (x[i] >= kernels().exp_flush_below) worst = std::max(worst, std::abs(double(y[i]) - want) / want);
  }
  RecordProperty("max_relative_error", std::to_string(worst));
}

TEST_P(VectorMath, ExpSpecialValues) {
  const std::vector<float> y = exp_of({-kInf, 0.0f, -1000.0f, -104.0f, 89.0f, kInf, 1.0f});
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 1.0f);  // the row maximum's own term must be exactly 1
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], kInf);
  EXPECT_EQ(y[5], kInf);
  EXPECT_NEAR(y[6], 2.718281828f, 2.5e-7 * 2.72);
  EXPECT_TRUE(std::isnan(exp_of({std::numeric_limits<float>::quiet_NaN()})[0]));
}

TEST_P(VectorMath, RowHelpersMatchPlainLoopsAtEveryTailLength) {
  const IsaKernels& k = kernels();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-8.0f, 8.0f);
  for (int64_t n = 0; n <= 3 * k.lanes + 1; ++n) {
    std::vector<float> x(size_t(n) + 1);
    for (float& v : x) v = uniform(rng);
    const float sentinel = x[size_t(n)];  // just past the row: must stay untouched

    float want_max = -kInf;
    for (int64_t j = 0; j < n; ++j) want_max = std::max(want_max, x[size_t(j)]);
    EXPECT_EQ(k.row_max(x.data(), n), want_max) << "n=" << n;

    const float scale = 0.125f, shift = scale * want_max;
    std::vector<float> e = x;
    double want_sum = 0.0;
    for (int64_t j = 0; j < n; ++j) want_sum += std::exp(double(scale) * x[size_t(j)] - double(shift));
    const float sum = k.exp_scaled_shifted_sum(e.data(), n, scale, shift);
    EXPECT_NEAR(sum, want_sum, 1e-6 * (want_sum + 1.0)) << "n=" << n;
    for (int64_t j = 0; j < n; ++j)
      EXPECT_NEAR(e[size_t(j)], std::exp(double(scale) * x[size_t(j)] - double(shift)), 1e-6) << "n=" << n;
    EXPECT_EQ(e[size_t(n)], sentinel);

    std::vector<float> s = x;
    k.scale_row(s.data(), n, -3.0f);
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(s[size_t(j)], -3.0f * x[size_t(j)]);
    EXPECT_EQ(s[size_t(n)], sentinel);

    double want_dot = 0.0;
    for (int64_t j = 0; j < n; ++j) want_dot += double(x[size_t(j)]) * double(e[size_t(j)]);
    EXPECT_NEAR(k.dot(x.data(), e.data(), n), want_dot, 1e-5 * (std::abs(want_dot) + 1.0)) << "n=" << n;
  }
}

TEST_P(VectorMath, MaskedEntriesAddNothing) {
  std::vector<float> x = {0.0f, -kInf, 0.0f, -kInf, -kInf};
  EXPECT_FLOAT_EQ(kernels().exp_scaled_shifted_sum(x.data(), 5, 1.0f, 0.0f), 2.0f);
  EXPECT_EQ(x[1], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, VectorMath, ::testing::ValuesIn(kAllIsas), testing::isa_test_name);

}  // namespace
}  // namespace flashbench::cpu
