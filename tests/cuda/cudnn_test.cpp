// Tests of `--impl cudnn` (cuDNN's fused attention inside flashbench). On a GPU with cuDNN: one
// layer on independent random Q, K, V against the float64 reference, O, dQ, dK and dV each judged
// apart, on the trap shapes (N = 1, prime N, causal, large logits, d = 64 and 128, bf16 and fp16; N
// = 1 and N not a multiple of 128 where this cuDNN runs them) with FlashAttention's bar (at most 3×
// the error of the same computation done naively in the storage precision, plus what exp costs at
// the largest logit); its measured memory equal to its model, cuDNN's workspace included, through
// the runner beside v2 on the same inputs. Those skip where there is no GPU or no cuDNN.
// Everywhere: fp32, head dims cuDNN's kernels cannot take, and what its graphs do not express (G <
// H, N_k ≠ N, dropout) are refused with a reason, and its model without a GPU counts what flashbench
// itself allocates around cuDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashbench/core/storage.hpp"
#include "flashbench/cuda/device.hpp"
#include "flashbench/harness/reference.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {
namespace {

#define SKIP_WITHOUT_CUDNN()                                                   \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";            \
  if (auto missing = cuda::cudnn_missing()) GTEST_SKIP() << "no cuDNN: " << *missing

const DeviceEntry& cuda_entry() { return registry().device("cuda"); }

std::unique_ptr<Implementation> implementation(const std::string& name) {
  return std::move(select_implementations(cuda_entry(), {name}).front());
}

struct Case {
  Dtype dtype;
  int64_t seq;
  int64_t head_dim;
  bool causal;
  double input_scale = 1.0;  // > 1 gives large logits: S_ii ≈ input_scale² · sqrt(d)
  // A shape cuDNN may decline (no engine: a skipped row, its reason printed); every other trap shape
  // must run, so that a graph cuDNN does not recognise cannot pass as a skip.
  bool may_be_declined = false;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = std::string(to_string(c.dtype)) + "_N" + std::to_string(c.seq) + "_d" +
                     std::to_string(c.head_dim) + (c.causal ? "_causal" : "");
  if (c.input_scale != 1.0) name += "_large_logits";
  return name;
}

// max |x − ref| / max |ref| of a double result, narrowed as a device's output would be.
// A reference that is zero throughout is judged against `scale`, its layer's (max_relative_error).
double relative_error(const std::vector<double>& x, const std::vector<double>& ref, double scale) {
  const std::vector<float> narrowed(x.begin(), x.end());
  return max_relative_error(narrowed, ref, scale);
}

class CudnnVsFloat64 : public testing::TestWithParam<Case> {};

TEST_P(CudnnVsFloat64, LayerMatchesReference) {
  SKIP_WITHOUT_CUDNN();
  const Case& c = GetParam();
  Problem problem;
  problem.batch = 1;
  problem.heads = 2;
  problem.seq = c.seq;
  problem.head_dim = c.head_dim;
  problem.layers = 1;
  problem.causal = c.causal;
  problem.dtype = c.dtype;

  // Q, K, V times input_scale and dO, drawn apart, already in the storage precision.
  std::mt19937_64 generator(0xc0d0 ^ uint64_t(c.seq * 131 + c.head_dim * 7 + int(c.dtype) * 3 + c.causal));
  std::normal_distribution<double> normal(0.0, 1.0);
  auto draw = [&](int64_t count, double scale) {
    std::vector<float> x(static_cast<size_t>(count));
    for (float& v : x) v = float(round_to(c.dtype, scale * normal(generator)));
    return x;
  };
  const std::vector<float> Q = draw(problem.q_elements(), c.input_scale), K = draw(problem.kv_elements(), c.input_scale),
                           V = draw(problem.kv_elements(), c.input_scale), dO = draw(problem.q_elements(), 1.0);

  std::unique_ptr<Device> device = cuda_entry().open(DeviceOptions{});
  std::unique_ptr<Implementation> cudnn = implementation("cudnn");
  if (const auto declined = cudnn->unsupported(problem)) {
    if (c.may_be_declined) GTEST_SKIP() << "cuDNN declines: " << *declined;
    FAIL() << "cuDNN declines a shape it is meant to run: " << *declined;
  }
  const Runner::Pass gpu = Runner(*device, RunOptions{}).run_once(problem, *cudnn, {Q, K, V, dO});

  const ReferenceShape shape{problem.heads_total(), problem.seq, problem.head_dim, problem.causal};
  const auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const LayerReference exact = reference_layer(shape, wide(Q), wide(K), wide(V), wide(dO));
  const double zero_scale = layer_scale(exact.O, exact.dQ, exact.dK, exact.dV);
  const LayerReference naive = reference_layer(shape, wide(Q), wide(K), wide(V), wide(dO), c.dtype);
  double naive_error = 0;
  for (const auto& [mine, truth] : {std::pair{&naive.O, &exact.O}, std::pair{&naive.dQ, &exact.dQ},
                                    std::pair{&naive.dK, &exact.dK}, std::pair{&naive.dV, &exact.dV}})
    naive_error = std::max(naive_error, relative_error(*mine, *truth, zero_scale));
  // exp(S − LSE) in fp32 carries about |S|·2⁻²⁴ of relative error whatever computes it.
  const double logit_bound = 8.0 * exact.max_abs_score * std::ldexp(1.0, -24);
  const double bar = 3.0 * naive_error + logit_bound + 1e-6;
  const struct {
    const char* name;
    const std::vector<float>& mine;
    const std::vector<double>& truth;
  } tensors[] = {{"O", gpu.O, exact.O}, {"dQ", gpu.dQ, exact.dQ}, {"dK", gpu.dK, exact.dK}, {"dV", gpu.dV, exact.dV}};
  for (const auto& tensor : tensors) {
    ASSERT_EQ(tensor.mine.size(), tensor.truth.size()) << tensor.name;
    const double error = max_relative_error(tensor.mine, tensor.truth, zero_scale);
    EXPECT_TRUE(std::isfinite(error)) << tensor.name << " is not finite";
    EXPECT_LE(error, bar) << tensor.name << ": naive " << to_string(c.dtype) << " error " << naive_error;
  }
}

std::vector<Case> trap_cases() {
  std::vector<Case> cases;
  for (Dtype t : {Dtype::bf16, Dtype::fp16}) {
    // Shapes every cuDNN 9 this implementation accepts must run: N a multiple of 128.
    cases.push_back({t, 128, 64, true});
    cases.push_back({t, 256, 128, false});
    cases.push_back({t, 384, 128, true});         // rows across several tiles, causal
    cases.push_back({t, 256, 64, false, 4.0});    // large logits
    // Shapes cuDNN declines by version (N = 1 always; N not a multiple of 128 up to 9.15, where its
    // backward needs a padding mask): skipped with the reason there, checked where it runs them.
    cases.push_back({t, 1, 64, true, 1.0, true});      // one row, one key
    cases.push_back({t, 97, 64, false, 1.0, true});    // prime N: no tile divides it
    cases.push_back({t, 97, 128, true, 1.0, true});
    cases.push_back({t, 200, 128, true, 1.0, true});
    cases.push_back({t, 131, 64, false, 4.0, true});   // large logits, prime N
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudnnVsFloat64, testing::ValuesIn(trap_cases()), case_name);

RunOptions quick_options() {
  RunOptions options;
  options.sampling.warmup = 1;
  options.sampling.warmup_ms = 0;
  options.sampling.min_samples = 3;
  options.sampling.max_samples = 3;
  options.sampling.max_time_s = 1.0;
  return options;
}

// Through the runner beside v2, on the same inputs: both pass the float64 check, cudnn keeps
// exactly what v2 keeps, and its ledger equals its model tag by tag, cuDNN's workspace included
// (the pre-flight built the plans before the model was asked).
TEST(CudnnDevice, MeasuredMemoryMatchesModelBesideV2) {
  SKIP_WITHOUT_CUDNN();
  Problem problem;
  problem.batch = 2;
  problem.heads = 3;
  problem.seq = 384;  // a multiple of 128: every cuDNN 9 this implementation accepts runs it
  problem.head_dim = 64;
  problem.layers = 3;
  problem.causal = true;
  problem.dtype = Dtype::bf16;
  std::unique_ptr<Device> device = cuda_entry().open(DeviceOptions{});
  const auto implementations = select_implementations(cuda_entry(), {"v2", "cudnn"});
  const std::vector<Implementation*> chosen = {implementations[0].get(), implementations[1].get()};
  const std::vector<Row> rows = Runner(*device, quick_options()).run(problem, chosen);
  ASSERT_EQ(rows.size(), 2u);
  for (const Row& row : rows) {
    SCOPED_TRACE(row.implementation());
    ASSERT_EQ(row.status, Status::ok) << row.reason;
    ASSERT_TRUE(row.model.has_value());
    EXPECT_EQ(row.measured.peak_bytes, row.model->peak_bytes);
    for (Tag tag : kAllTags) EXPECT_EQ(row.measured.by_tag[tag], row.model->by_tag[tag]) << to_string(tag);
    ASSERT_TRUE(row.check.has_value()) << row.not_checked;
    EXPECT_TRUE(row.check->passed()) << row.check->max_rel_err << " > " << row.check->tolerance;
    ASSERT_EQ(row.check->tensors.size(), 4u);  // O, dQ, dK, dV each compared
    for (const CheckedTensor& tensor : row.check->tensors)
      EXPECT_LE(tensor.rel_err, row.check->tolerance) << tensor.name;
  }
  EXPECT_EQ(rows[1].impl, "cudnn");
  EXPECT_EQ(rows[1].variant, Variant::v2);
  EXPECT_EQ(rows[1].measured.kept_bytes, rows[0].measured.kept_bytes);
}

// ---- everywhere ----

// fp32, a head dim that is not a multiple of 8, N = 1, and what flashbench's graphs do not express
// (G < H natively or expanded, N_k ≠ N, dropout) are refused with a reason (a skipped row), GPU or
// not, cuDNN or not.
TEST(CudnnModel, WhatItCannotRunIsRefusedWithAReason) {
  std::unique_ptr<Implementation> cudnn = implementation("cudnn");
  Problem base;
  base.seq = 256;
  base.head_dim = 64;
  base.dtype = Dtype::bf16;
  Problem fp32 = base, odd = base, single = base, gqa = base, expanded = base, cross = base, dropout = base;
  fp32.dtype = Dtype::fp32;
  odd.head_dim = 36;
  single.seq = 1;
  gqa.kv_heads = 2;
  expanded.kv_heads = 2;
  expanded.expand_kv = true;
  cross.seq_kv = 384;
  dropout.dropout = 0.1;
  const std::pair<const Problem*, const char*> refused[] = {{&fp32, "fp32"},         {&odd, "head_dim"},
                                                           {&single, "N = 1"},       {&gqa, "G = H"},
                                                           {&expanded, "G = H"},     {&cross, "N_k = N"},
                                                           {&dropout, "dropout"}};
  // Built without cuDNN's headers, every reason is that one.
  const std::optional<std::string> missing = cuda::cudnn_missing();
  const bool not_built = missing && missing->find("built without cuDNN") != std::string::npos;
  for (const auto& [problem, word] : refused) {
    SCOPED_TRACE(problem->describe());
    const auto why = cudnn->unsupported(*problem);
    ASSERT_TRUE(why.has_value());
    if (not_built) {
      EXPECT_EQ(*why, *missing);
    } else if (problem != &single || !missing) {  // N = 1 is refused by version, once cuDNN is loaded
      EXPECT_NE(why->find(word), std::string::npos) << *why;
    }
  }
}

// Without plans (no GPU asked), its costs are what flashbench allocates around cuDNN: the row dot
// and the fp32 dQ accumulator (workspace), nothing in forward, no gradient buffer beside the stack's
// dQ, dK, dV (the graph writes them); it keeps what v2 keeps.
TEST(CudnnModel, CostsWithoutPlansCountFlashbenchsOwnBuffers) {
  const DeviceEntry& entry = cuda_entry();
  std::unique_ptr<Implementation> cudnn = implementation("cudnn");
  EXPECT_EQ(cudnn->variant(), Variant::v2);
  Problem problem;
  problem.batch = 2;
  problem.heads = 3;
  problem.seq = 257;
  problem.head_dim = 64;
  problem.dtype = Dtype::fp16;
  const ModelParams params = entry.offline_params(problem, DeviceOptions{});
  const LayerCosts costs = cudnn->costs(problem, params);
  const int64_t q = 2 * 3 * 257 * 64, rows = 2 * 3 * 257;
  EXPECT_EQ(costs.forward_workspace_bytes, 0);
  EXPECT_EQ(costs.backward_workspace_bytes, rows * 4 + q * 4);
  EXPECT_EQ(costs.backward_extra_grad_bytes, 0);
  const ModelledMemory model = model_memory(problem, cudnn->variant(), costs, params);
  EXPECT_EQ(model.kept_bytes, problem.layers * kept_bytes_per_layer(Variant::v2, problem));
}

}  // namespace
}  // namespace flashbench
