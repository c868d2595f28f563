// GPU tests of the CUDA backend: every variant against a float64 CPU reference at small shapes
// (odd N, N spanning several tiles, N = 1, causal, d = 64 and 128, L = 2, large logits), with
// FlashAttention's bar for 16-bit types: the error may be at most 3× that of the same computation
// done naively in the same precision (emulated here by rounding every stored tensor). fp32 must be
// within 1e-5. Also: measured memory equals the CUDA memory model, and an allocation failure
// becomes an `oom` row. Every test skips with "no CUDA device" where there is none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flashbench/backend.hpp"
#include "flashbench/cuda/stack.hpp"
#include "flashbench/errors.hpp"

namespace flashbench {
namespace {

#define SKIP_WITHOUT_CUDA_DEVICE() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

// Round to the nearest value of the storage dtype (ties to even), in double.
double round_to(double x, Dtype dtype) {
  if (dtype == Dtype::fp32) return double(float(x));
  if (x == 0 || !std::isfinite(x)) return x;
  const int significant_bits = dtype == Dtype::bf16 ? 8 : 11;
  const int min_exponent = dtype == Dtype::bf16 ? -126 : -14;  // below it, fixed (subnormal) spacing
  const int exponent = std::max(std::ilogb(x), min_exponent);
  const double quantum = std::ldexp(1.0, exponent - (significant_bits - 1));
  const double rounded = std::nearbyint(x / quantum) * quantum;
  if (dtype == Dtype::fp16 && std::fabs(rounded) > 65504.0) return std::copysign(INFINITY, x);
  return rounded;
}

// The float64 reference of the layer stack (Q = K = V = X_i, dX_i = dQ + dK + dV), plain loops
// from the formulas. With `emulate` set, every tensor the standard variant stores (S, P, O, dP,
// dS, and dX after each of its three accumulations) is rounded to `dtype`: the naive computation
// in the storage precision.
struct StackOut {
  std::vector<double> output, input_grad;
};

StackOut reference_stack(const Problem& p, const std::vector<double>& X0, const std::vector<double>& dOut,
                         bool emulate) {
  const int64_t BH = p.heads_total(), N = p.seq, d = p.head_dim, L = p.layers;
  const double scale = 1.0 / std::sqrt(double(d));
  const auto r = [&](double x) { return emulate ? round_to(x, p.dtype) : x; };
  std::vector<std::vector<double>> X(L + 1), P(L);
  X[0] = X0;
  for (int64_t layer = 0; layer < L; ++layer) {
    const std::vector<double>& x = X[layer];
    std::vector<double>& out = X[layer + 1];
    out.assign(BH * N * d, 0.0);
    P[layer].assign(BH * N * N, 0.0);
    for (int64_t h = 0; h < BH; ++h) {
      const double* xh = &x[h * N * d];
      for (int64_t i = 0; i < N; ++i) {
        const int64_t visible = p.causal ? i + 1 : N;
        std::vector<double> s(visible);
        double max = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t k = 0; k < d; ++k) dot += xh[i * d + k] * xh[j * d + k];
          s[j] = r(scale * dot);
          max = std::max(max, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += std::exp(s[j] - max);
        double* prow = &P[layer][(h * N + i) * N];
        for (int64_t j = 0; j < visible; ++j) prow[j] = r(std::exp(s[j] - max) / sum);
        for (int64_t k = 0; k < d; ++k) {
          double o = 0;
          for (int64_t j = 0; j < visible; ++j) o += prow[j] * xh[j * d + k];
          out[(h * N + i) * d + k] = r(o);
        }
      }
    }
  }
  std::vector<double> grad = dOut;
  for (int64_t layer = L - 1; layer >= 0; --layer) {
    const std::vector<double>& x = X[layer];
    std::vector<double> dX(BH * N * d, 0.0);
    for (int64_t h = 0; h < BH; ++h) {
      const double* xh = &x[h * N * d];
      const double* g = &grad[h * N * d];
      const double* ph = &P[layer][h * N * N];
      // dP = dO Xᵀ, then dS = P ∘ (dP − D) with D_i = Σ_j P_ij dP_ij over the whole row.
      std::vector<double> dS(N * N, 0.0);
      for (int64_t i = 0; i < N; ++i) {
        std::vector<double> dP(N, 0.0);
        double D = 0;
        for (int64_t j = 0; j < N; ++j) {
          double dot = 0;
          for (int64_t k = 0; k < d; ++k) dot += g[i * d + k] * xh[j * d + k];
          dP[j] = r(dot);
          D += ph[i * N + j] * dP[j];
        }
        for (int64_t j = 0; j < N; ++j) dS[i * N + j] = r(ph[i * N + j] * (dP[j] - D));
      }
      for (int64_t i = 0; i < N; ++i)
        for (int64_t k = 0; k < d; ++k) {
          double dv = 0, dq = 0, dk = 0;
          for (int64_t j = 0; j < N; ++j) {
            dv += ph[j * N + i] * g[j * d + k];    // dV = Pᵀ dO
            dq += dS[i * N + j] * xh[j * d + k];   // dQ = scale · dS K
            dk += dS[j * N + i] * xh[j * d + k];   // dK = scale · dSᵀ Q
          }
          double& out = dX[(h * N + i) * d + k];
          out = r(dv);
          out = r(out + scale * dq);
          out = r(out + scale * dk);
        }
    }
    grad = std::move(dX);
  }
  return {X[L], grad};
}

// The largest |S_ij| = scale·|X_i·X_j| of the first layer (the layer that sees the raw inputs).
double max_abs_score(const Problem& p, const std::vector<double>& X0) {
  const int64_t N = p.seq, d = p.head_dim;
  const double scale = 1.0 / std::sqrt(double(d));
  double largest = 0;
  for (int64_t h = 0; h < p.heads_total(); ++h)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < d; ++k) dot += X0[(h * N + i) * d + k] * X0[(h * N + j) * d + k];
        largest = std::max(largest, std::fabs(scale * dot));
      }
  return largest;
}

double relative_error(const std::vector<float>& x, const std::vector<double>& ref) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double diff = std::fabs(double(x[i]) - ref[i]);
    max_diff = std::isnan(diff) ? INFINITY : std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

double relative_error(const std::vector<double>& x, const std::vector<double>& ref) {
  return relative_error(std::vector<float>(x.begin(), x.end()), ref);
}

struct Case {
  Variant variant;
  Dtype dtype;
  int64_t seq;
  int64_t head_dim;
  bool causal;
  double input_scale = 1.0;  // > 1 gives large logits: S_ii ≈ input_scale² · sqrt(d)
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = std::string(to_string(c.variant)) + "_" + std::string(to_string(c.dtype)) + "_N" +
                     std::to_string(c.seq) + "_d" + std::to_string(c.head_dim) + (c.causal ? "_causal" : "");
  if (c.input_scale != 1.0) name += "_large_logits";
  return name;
}

class CudaVsFloat64 : public testing::TestWithParam<Case> {};

TEST_P(CudaVsFloat64, StackMatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Case& c = GetParam();
  Problem problem;
  problem.batch = 1;
  problem.heads = 2;
  problem.seq = c.seq;
  problem.head_dim = c.head_dim;
  problem.layers = 2;
  problem.causal = c.causal;
  problem.dtype = c.dtype;

  // Fresh random inputs, already in the storage precision so that GPU and reference start equal.
  std::mt19937_64 generator(0x5eed ^ uint64_t(c.seq * 131 + c.head_dim * 7 + int(c.dtype) * 3 + c.causal));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> X0(problem.qkv_elements()), dO(problem.qkv_elements());
  for (float& x : X0) x = float(round_to(c.input_scale * normal(generator), c.dtype));
  for (float& x : dO) x = float(round_to(normal(generator), c.dtype));
  const std::vector<double> X0_exact(X0.begin(), X0.end()), dO_exact(dO.begin(), dO.end());

  const StackOut exact = reference_stack(problem, X0_exact, dO_exact, false);
  const cuda::StackResult gpu = cuda::run_stack_once(c.variant, problem, X0, dO);
  const double error = std::max(relative_error(gpu.output, exact.output), relative_error(gpu.input_grad, exact.input_grad));
  ASSERT_TRUE(std::isfinite(error)) << "non-finite output or gradient";

  // exp(S − LSE) in fp32 carries a relative error of about |S|·2⁻²⁴ whatever the implementation
  // (the exponential's condition number is its argument), so with large logits the bound grows
  // with the largest |S|; for ordinary inputs (|S| ≈ sqrt(d)) the fp32 bar stays 1e-5.
  const double logit_bound = 8.0 * max_abs_score(problem, X0_exact) * std::ldexp(1.0, -24);
  if (c.dtype == Dtype::fp32) {
    EXPECT_LE(error, std::max(1e-5, logit_bound)) << "fp32 error against float64";
  } else {
    const StackOut naive = reference_stack(problem, X0_exact, dO_exact, true);
    const double naive_error = std::max(relative_error(naive.output, exact.output),
                                        relative_error(naive.input_grad, exact.input_grad));
    EXPECT_LE(error, 3.0 * naive_error + logit_bound + 1e-6)
        << "error " << error << " vs naive " << to_string(c.dtype) << " error " << naive_error;
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Variant v : kAllVariants)
    for (Dtype t : {Dtype::fp32, Dtype::bf16, Dtype::fp16})
      for (int64_t d : {64, 128})
        for (bool causal : {false, true}) cases.push_back({v, t, 77, d, causal});
  // Rows spanning several 64-wide tiles (the whole-row D), N = 1, and large logits.
  for (Variant v : kAllVariants)
    for (Dtype t : {Dtype::fp32, Dtype::bf16, Dtype::fp16}) {
      cases.push_back({v, t, 200, 128, true});
      cases.push_back({v, t, 200, 64, false});
      cases.push_back({v, t, 1, 64, true});
      cases.push_back({v, t, 130, 128, false, 4.0});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudaVsFloat64, testing::ValuesIn(all_cases()), case_name);

RunOptions quick_options() {
  RunOptions options;
  options.sampling.warmup = 1;
  options.sampling.min_samples = 5;
  options.sampling.max_samples = 5;
  options.sampling.max_time_s = 1.0;
  return options;
}

// The ledger's measured peak, split and kept bytes equal the CUDA model's closed form; the pool's
// own high-water mark is at least the tracked peak.
TEST(CudaBackend, MeasuredMemoryMatchesModel) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem problem;
  problem.batch = 2;
  problem.heads = 3;
  problem.seq = 300;
  problem.head_dim = 64;
  problem.layers = 3;
  problem.causal = true;
  problem.dtype = Dtype::bf16;
  std::unique_ptr<Backend> backend = make_cuda_backend();
  const std::vector<Row> rows = backend->run(problem, kAllVariants, quick_options());
  ASSERT_EQ(rows.size(), kAllVariants.size());
  for (const Row& row : rows) {
    SCOPED_TRACE(std::string(to_string(row.variant)));
    ASSERT_EQ(row.status, Status::ok) << row.reason;
    ASSERT_TRUE(row.model.has_value());
    EXPECT_EQ(row.measured.peak_bytes, row.model->peak_bytes);
    EXPECT_EQ(row.measured.kept_bytes, row.model->kept_bytes);
    EXPECT_EQ(row.measured.kept_bytes, problem.layers * kept_bytes_per_layer(row.variant, problem));
    EXPECT_EQ(row.measured.peak_phase, row.model->peak_phase);
    for (Tag tag : kAllTags) EXPECT_EQ(row.measured.by_tag[tag], row.model->by_tag[tag]) << to_string(tag);
    ASSERT_TRUE(row.measured.os_peak_bytes.has_value());
    EXPECT_GE(*row.measured.os_peak_bytes, row.measured.peak_bytes);
    EXPECT_EQ(row.fwd.count(), 5);
    EXPECT_GT(row.fwd.median_ms, 0.0);
    EXPECT_GT(row.bwd.median_ms, 0.0);
    EXPECT_EQ(row.device.empty(), false);
    if (row.variant != Variant::standard) {
      ASSERT_TRUE(row.check.has_value());
      EXPECT_EQ(row.check->reference, "standard");
      EXPECT_TRUE(row.check->passed()) << row.check->max_rel_err;
    }
  }
}

// A memory limit below standard's N×N but above v2's needs: standard is an `oom` row, v2 runs.
TEST(CudaBackend, OutOfMemoryBecomesARow) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem problem;
  problem.heads = 4;
  problem.seq = 2048;
  problem.head_dim = 64;
  problem.dtype = Dtype::bf16;
  const cuda::CudaModelParams params;  // only the v2 peak matters for choosing the limit
  RunOptions options = quick_options();
  options.mem_limit_bytes = cuda::model_memory_cuda(problem, Variant::v2, {params.blas_workspace_bytes, 4}).peak_bytes;
  ASSERT_LT(options.mem_limit_bytes, cuda::model_memory_cuda(problem, Variant::standard, {params.blas_workspace_bytes, 1}).peak_bytes);
  std::unique_ptr<Backend> backend = make_cuda_backend();
  const std::vector<Variant> variants = {Variant::standard, Variant::v2};
  const std::vector<Row> rows = backend->run(problem, variants, options);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, Status::oom);
  EXPECT_FALSE(rows[0].reason.empty());
  EXPECT_EQ(rows[1].status, Status::ok) << rows[1].reason;
}

TEST(CudaBackend, AskingWithoutADeviceIsAUsageError) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(make_cuda_backend(), UsageError);
}

}  // namespace
}  // namespace flashbench
