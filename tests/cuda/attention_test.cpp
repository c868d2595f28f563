// Tests of the CUDA device through the harness. On a GPU: every implementation's layer on
// independent random Q, K, V against the float64 reference, O, dQ, dK and dV each judged apart, at
// small shapes and their traps (N = 1, prime and odd N, odd d on the cuBLAS variants, N spanning
// several tiles, N_k ≠ N both ways, GQA and MQA native and expanded, causal, dropout, large
// logits, d = 64 to 256), with FlashAttention's bar for 16-bit types (at most 3× the error of the
// same computation done naively in the same precision, plus what exp costs at the largest logit)
// and the runner's for fp32; backward writing its gradients over whatever the pool hands it;
// measured memory equal to the model; a model that does not fit is a `skipped` row; the GPU
// refusing memory is OutOfMemory and leaves the device usable; a variant run alone is still
// checked against float64; an unsupported head dim skips only v2; occupy keeps the stream busy for
// the time asked. Those skip where there is no GPU. Everywhere: the model's view of the device
// without opening it, and opening it without a GPU is a usage error.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/storage.hpp"
#include "flashbench/cuda/device.hpp"
#include "flashbench/harness/reference.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/harness/stack.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {
namespace {

#define SKIP_WITHOUT_CUDA_DEVICE() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

const DeviceEntry& cuda_entry() { return registry().device("cuda"); }

std::unique_ptr<Device> open_cuda() { return cuda_entry().open(DeviceOptions{}); }

std::unique_ptr<Implementation> implementation(const std::string& name) {
  return std::move(select_implementations(cuda_entry(), {name}).front());
}

std::vector<Implementation*> pointers(const std::vector<std::unique_ptr<Implementation>>& implementations) {
  std::vector<Implementation*> out;
  for (const auto& implementation : implementations) out.push_back(implementation.get());
  return out;
}

// One layer's host inputs, already in the storage precision so that GPU and reference start equal:
// Q, K, V standard normal times `input_scale` (the runner's --input-scale), dO standard normal.
struct HostLayer {
  std::vector<float> Q, K, V, dO;
  Runner::HostInputs inputs() const { return {Q, K, V, dO}; }
};

HostLayer random_layer(const Problem& p, double input_scale, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto draw = [&](int64_t count, double scale) {
    std::vector<float> x(static_cast<size_t>(count));
    for (float& v : x) v = float(round_to(p.dtype, scale * normal(generator)));
    return x;
  };
  HostLayer layer;
  layer.Q = draw(p.q_elements(), input_scale);
  layer.K = draw(p.kv_elements(), input_scale);
  layer.V = draw(p.kv_elements(), input_scale);
  layer.dO = draw(p.q_elements(), 1.0);
  return layer;
}

// The float64 reference of one layer of `p`, exact and done naively in the storage dtype, keyed for
// dropout as Runner::run_once keys layer 0 (the runner's seed, offset 0, every head).
struct LayerReferences {
  LayerReference exact, naive;
};

LayerReferences reference_of(const Problem& p, const HostLayer& layer) {
  ReferenceShape shape{p.heads_total(), p.seq, p.head_dim, p.causal, p.key_seq(), p.group_size()};
  shape.dropout = p.dropout;
  shape.dropout_seed = RunOptions{}.seed;
  shape.dropout_offset = 0;
  const std::vector<double> Q(layer.Q.begin(), layer.Q.end()), K(layer.K.begin(), layer.K.end()),
      V(layer.V.begin(), layer.V.end()), dO(layer.dO.begin(), layer.dO.end());
  return {reference_layer(shape, Q, K, V, dO), reference_layer(shape, Q, K, V, dO, p.dtype)};
}

// max |x − ref| / max |ref| of a double result, narrowed as a device's output would be.
// A reference that is zero throughout is judged against `scale`, its layer's (max_relative_error).
double relative_error(const std::vector<double>& x, const std::vector<double>& ref, double scale) {
  const std::vector<float> narrowed(x.begin(), x.end());
  return max_relative_error(narrowed, ref, scale);
}

// The runner's judgement (runner.cpp), each tensor apart: its error against float64 at most 3× the
// largest error of the naive computation in the storage dtype, plus what exp(S − LSE) costs in fp32
// at the largest logit (its condition number is its argument), plus a floor for summation order
// (1e-5 in fp32, 1e-6 in 16 bits). A gradient that is missing, added twice or moved from dK to dV
// fails by name.
void expect_matches_reference(const Problem& p, const Runner::Pass& got, const LayerReferences& ref,
                              const std::string& where) {
  const LayerReference& exact = ref.exact;
  const double zero_scale = layer_scale(exact.O, exact.dQ, exact.dK, exact.dV);
  const LayerReference& naive = ref.naive;
  ASSERT_EQ(got.O.size(), exact.O.size()) << where;
  ASSERT_EQ(got.dQ.size(), exact.dQ.size()) << where;
  ASSERT_EQ(got.dK.size(), exact.dK.size()) << where;
  ASSERT_EQ(got.dV.size(), exact.dV.size()) << where;
  double naive_error = 0;
  for (const auto& [mine, truth] : {std::pair{&naive.O, &exact.O}, std::pair{&naive.dQ, &exact.dQ},
                                    std::pair{&naive.dK, &exact.dK}, std::pair{&naive.dV, &exact.dV}}) {
    const double error = relative_error(*mine, *truth, zero_scale);
    if (std::isfinite(error)) naive_error = std::max(naive_error, error);
  }
  const double logit_bound = 8.0 * exact.max_abs_score * std::ldexp(1.0, -24);
  const double floor = p.dtype == Dtype::fp32 ? 1e-5 : 1e-6;
  const double bar = 3.0 * naive_error + logit_bound + floor;
  const struct {
    const char* name;
    const std::vector<float>& mine;
    const std::vector<double>& truth;
  } tensors[] = {{"O", got.O, exact.O}, {"dQ", got.dQ, exact.dQ}, {"dK", got.dK, exact.dK}, {"dV", got.dV, exact.dV}};
  for (const auto& tensor : tensors) {
    const double error = max_relative_error(tensor.mine, tensor.truth, zero_scale);
    EXPECT_TRUE(std::isfinite(error)) << where << ": " << tensor.name << " is not finite";
    EXPECT_LE(error, bar) << where << ": " << tensor.name << " error " << error << " vs naive "
                          << to_string(p.dtype) << " error " << naive_error;
  }
}

struct Case {
  Variant variant;
  Dtype dtype;
  int64_t seq;
  int64_t head_dim;
  bool causal;
  double input_scale = 1.0;  // > 1 gives large logits: |S_ij| ≈ input_scale² · sqrt(d)
  std::string impl = "";     // an implementation other than the variant's default (v2.mma)
  // The workload beyond square attention: K/V heads (0: H), key rows (0: N), naive GQA, dropout.
  int64_t kv_heads = 0;
  int64_t seq_k = 0;
  bool expand_kv = false;
  double dropout = 0;
  std::string implementation_name() const { return impl.empty() ? std::string(to_string(variant)) : impl; }
};

constexpr int64_t kHeads = 4;  // H of every Case: room for GQA (G = 2) and MQA (G = 1)

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string implementation = c.implementation_name();
  for (char& ch : implementation)
    if (ch == '.') ch = '_';
  std::string name = implementation + "_" + std::string(to_string(c.dtype)) + "_N" + std::to_string(c.seq);
  if (c.seq_k) name += "_Nk" + std::to_string(c.seq_k);
  if (c.kv_heads) name += "_G" + std::to_string(c.kv_heads) + (c.expand_kv ? "_expand" : "");
  name += "_d" + std::to_string(c.head_dim) + (c.causal ? "_causal" : "");
  if (c.dropout > 0) name += "_dropout";
  if (c.input_scale != 1.0) name += "_large_logits";
  return name;
}

Problem problem_of(const Case& c) {
  Problem problem;
  problem.batch = 1;
  problem.heads = kHeads;
  problem.kv_heads = c.kv_heads;
  problem.seq = c.seq;
  problem.seq_kv = c.seq_k;
  problem.expand_kv = c.expand_kv;
  problem.dropout = c.dropout;
  problem.head_dim = c.head_dim;
  problem.layers = 1;
  problem.causal = c.causal;
  problem.dtype = c.dtype;
  return problem;
}

class CudaVsFloat64 : public testing::TestWithParam<Case> {};

TEST_P(CudaVsFloat64, LayerMatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Case& c = GetParam();
  const bool wgmma_only = c.variant == Variant::v2 && (c.head_dim == 96 || c.head_dim > 128);
  if (wgmma_only && cuda::compute_capability(0) != 90)
    GTEST_SKIP() << "d = " << c.head_dim << " runs on the wgmma kernels only";
  const Problem problem = problem_of(c);
  const HostLayer layer = random_layer(
      problem, c.input_scale,
      0x5eed ^ uint64_t(c.seq * 131 + c.seq_k * 17 + c.head_dim * 7 + int(c.dtype) * 3 + c.causal + c.kv_heads * 1009));
  std::unique_ptr<Device> device = open_cuda();
  std::unique_ptr<Implementation> impl = implementation(c.implementation_name());
  const Runner::Pass gpu = Runner(*device, RunOptions{}).run_once(problem, *impl, layer.inputs());
  expect_matches_reference(problem, gpu, reference_of(problem, layer),
                           c.implementation_name() + " " + problem.describe());
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
  // The workloads on every variant: N_k > N and N_k < N causal (rows that see no key), GQA native
  // and expanded, MQA with N = 1, dropout alone and with GQA, prime lengths.
  for (Variant v : kAllVariants)
    for (Dtype t : {Dtype::fp32, Dtype::bf16, Dtype::fp16}) {
      cases.push_back({.variant = v, .dtype = t, .seq = 67, .head_dim = 64, .causal = true, .seq_k = 131});
      cases.push_back({.variant = v, .dtype = t, .seq = 131, .head_dim = 128, .causal = true, .seq_k = 67});
      cases.push_back({.variant = v, .dtype = t, .seq = 97, .head_dim = 64, .causal = false, .kv_heads = 2, .seq_k = 150});
      cases.push_back({.variant = v, .dtype = t, .seq = 97, .head_dim = 64, .causal = true, .kv_heads = 2, .seq_k = 150,
                       .expand_kv = true});
      cases.push_back({.variant = v, .dtype = t, .seq = 1, .head_dim = 128, .causal = true, .kv_heads = 1, .seq_k = 37});
      cases.push_back({.variant = v, .dtype = t, .seq = 83, .head_dim = 64, .causal = true, .dropout = 0.2});
      cases.push_back({.variant = v, .dtype = t, .seq = 130, .head_dim = 128, .causal = false, .kv_heads = 2,
                       .seq_k = 190, .dropout = 0.1});
      cases.push_back({.variant = v, .dtype = t, .seq = 61, .head_dim = 64, .causal = false, .kv_heads = 1, .seq_k = 83,
                       .expand_kv = true, .dropout = 0.1});
    }
  // Odd head dims through cuBLAS (standard, v1, checkpoint run any d; v2's kernels refuse them:
  // UnsupportedHeadDimSkipsOnlyV2), with GQA and N_k ≠ N.
  for (Variant v : {Variant::standard, Variant::v1, Variant::checkpoint})
    for (Dtype t : {Dtype::fp32, Dtype::bf16, Dtype::fp16}) {
      cases.push_back({v, t, 53, 33, true});
      cases.push_back({.variant = v, .dtype = t, .seq = 29, .head_dim = 1, .causal = false, .kv_heads = 2, .seq_k = 41});
      cases.push_back({.variant = v, .dtype = t, .seq = 71, .head_dim = 97, .causal = true, .kv_heads = 1, .seq_k = 59});
    }
  // The materialising variants' softmax with the row in registers: a warp a row in four chunks a
  // lane (N = 1000; in fp32 eight), a block a row (N = 2056), causal rows of every visible length.
  for (Variant v : {Variant::standard, Variant::v1, Variant::checkpoint})
    for (Dtype t : {Dtype::fp32, Dtype::bf16, Dtype::fp16}) {
      cases.push_back({v, t, 1000, 64, true});
      cases.push_back({v, t, 2056, 64, v != Variant::v1});
    }
  // The same in the longest a warp holds (N = 2048: eight chunks a lane in 16 bits) and in four
  // chunks a thread of a block's row (N = 4104).
  cases.push_back({Variant::standard, Dtype::fp16, 2048, 64, false});
  cases.push_back({Variant::standard, Dtype::bf16, 4104, 64, true});
  // v2's tensor-core kernels, the newest (wgmma on Hopper) and the kept mma.sync ones, over a prime
  // N that spans several query blocks (128 or 192 rows) and 64-query tiles with a ragged last one;
  // with MQA the r = 4 query heads of a K/V head walk into one block's dK and dV (and on wgmma split
  // over the grid's z: their shares added into the same dK and dV rows). v2.stored: the same wgmma
  // kernels storing dK and dV where G = H.
  for (const char* impl : {"v2", "v2.stored", "v2.mma"})
    for (Dtype t : {Dtype::bf16, Dtype::fp16})
      for (int64_t d : {64, 128})
        for (bool causal : {false, true}) {
          cases.push_back({Variant::v2, t, 383, d, causal, 1.0, impl});
          cases.push_back({.variant = Variant::v2, .dtype = t, .seq = 383, .head_dim = d, .causal = causal,
                           .impl = impl, .kv_heads = 1, .seq_k = 257});
        }
  // Enough key tiles (128 or more keys each) that each stage of the forward's K/V ring is refilled
  // and its mbarrier's phase comes round again.
  for (Dtype t : {Dtype::bf16, Dtype::fp16})
    for (int64_t d : {64, 128}) cases.push_back({Variant::v2, t, 1000, d, false});
  // The d = 64 forward's blocks of three warpgroups over enough rows that the causal ones' first
  // warpgroups stop one key tile short of their block's last (each computes the tiles its rows see).
  for (Dtype t : {Dtype::bf16, Dtype::fp16}) cases.push_back({Variant::v2, t, 2053, 64, t == Dtype::bf16});
  // And causal with a last block of 80 rows (N = 2000 = 10·192 + 80): its middle warpgroup holds 16
  // rows, its last none, so they see fewer tiles than the block or none at all.
  cases.push_back({Variant::v2, Dtype::fp16, 2000, 64, true});
  // d = 96 on the wgmma kernels, zero-padded to 128-wide tiles: ragged tiles, N = 1, large logits,
  // GQA with dropout.
  for (Dtype t : {Dtype::bf16, Dtype::fp16}) {
    for (bool causal : {false, true}) cases.push_back({Variant::v2, t, 383, 96, causal});
    cases.push_back({Variant::v2, t, 1, 96, false});
    cases.push_back({Variant::v2, t, 130, 96, true, 4.0});
    cases.push_back({.variant = Variant::v2, .dtype = t, .seq = 201, .head_dim = 96, .causal = true, .kv_heads = 2,
                     .seq_k = 150, .dropout = 0.1});
  }
  // d = 192 and 256 on the wgmma kernels (the forward in 112- and 80-key tiles; the backward splits
  // its products between the warpgroups, dV from one and dK from the other into their own
  // accumulators): ragged tiles, N = 1, large logits, MQA with N_k > N.
  for (Dtype t : {Dtype::bf16, Dtype::fp16})
    for (int64_t d : {192, 256}) {
      for (bool causal : {false, true}) cases.push_back({Variant::v2, t, 383, d, causal});
      cases.push_back({Variant::v2, t, 1, d, true});
      cases.push_back({Variant::v2, t, 130, d, true, 4.0});
      cases.push_back({.variant = Variant::v2, .dtype = t, .seq = 131, .head_dim = d, .causal = false, .kv_heads = 1,
                       .seq_k = 389});
    }
  for (Dtype t : {Dtype::bf16, Dtype::fp16})
    for (int64_t d : {64, 128}) {
      cases.push_back({Variant::v2, t, 77, d, true, 1.0, "v2.mma"});
      cases.push_back({Variant::v2, t, 1, d, false, 1.0, "v2.mma"});
      cases.push_back({Variant::v2, t, 130, d, false, 4.0, "v2.mma"});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudaVsFloat64, testing::ValuesIn(all_cases()), case_name);

// Backward writes its gradients (beta 0, the accumulators zeroed), never adds: the same layer twice in
// one memory space, whose pool hands the second backward the blocks the first one's gradients and
// accumulators were in, gives the reference's answer both times.
TEST(CudaDevice, BackwardWritesOverWhatThePoolHandsIt) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem problem;
  problem.heads = 4;
  problem.kv_heads = 2;
  problem.seq = 130;
  problem.seq_kv = 190;
  problem.head_dim = 64;
  problem.causal = true;
  problem.dtype = Dtype::bf16;
  const HostLayer host = random_layer(problem, 1.0, 0xbe7a);
  const LayerReferences ref = reference_of(problem, host);
  std::unique_ptr<Device> device = open_cuda();
  for (bool expand : {false, true}) {
    Problem p = problem;
    p.expand_kv = expand;
    for (const char* name : {"standard", "v1", "v2", "checkpoint", "v2.mma", "v2.stored"}) {
      std::unique_ptr<Implementation> impl = implementation(name);
      MemoryLedger ledger;
      std::unique_ptr<MemorySpace> space = device->open_space(ledger);
      auto upload = [&](const std::vector<float>& values) {
        RawBuffer buffer(*space, Tag::input, int64_t(values.size()) * element_bytes(p.dtype));
        device->upload(values, p.dtype, buffer.data());
        return buffer;
      };
      const RawBuffer Q = upload(host.Q), K = upload(host.K), V = upload(host.V), dO = upload(host.dO);
      const LayerData layer{{Q.data(), K.data(), V.data()}, dO.data()};
      LayerStack stack(p, *impl, *device, *space, RunOptions{}.seed);
      for (int round = 0; round < 2; ++round) {
        stack.forward({&layer, 1});
        Runner::Pass pass;
        pass.O = device->download(stack.output(0), p.dtype, 0, p.q_elements());
        const LayerStack::Gradients gradients = stack.backward({&layer, 1});
        pass.dQ = device->download(gradients.dQ.data(), p.dtype, 0, p.q_elements());
        pass.dK = device->download(gradients.dK.data(), p.dtype, 0, p.kv_elements());
        pass.dV = device->download(gradients.dV.data(), p.dtype, 0, p.kv_elements());
        expect_matches_reference(p, pass, ref, std::string(name) + " " + p.describe() + " round " + std::to_string(round));
      }
    }
  }
}

// occupy(ms) keeps the stream busy for about that long (a spin kernel queued on it, not a wait on
// the host): the interval between timer marks around it is at least the time asked, and the host
// returns from it at once.
TEST(CudaDevice, OccupyKeepsTheStreamBusy) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::unique_ptr<Device> device = open_cuda();
  std::unique_ptr<PhaseTimer> timer = device->timer();
  device->occupy(0);  // nothing queued, nothing thrown
  device->synchronize();
  for (double ms : {2.0, 20.0}) {
    timer->mark();
    const auto host_start = std::chrono::steady_clock::now();
    device->occupy(ms);
    const double host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start).count();
    timer->mark();
    const std::vector<double> intervals = timer->intervals_ms();
    ASSERT_EQ(intervals.size(), 1u);
    EXPECT_GE(intervals[0], 0.99 * ms) << "the stream was busy for less than asked";
    EXPECT_LE(intervals[0], ms + 50.0) << "the spin ran far past what was asked (units?)";
    EXPECT_LT(host_ms, ms) << "occupy waited on the host";
  }
}

RunOptions quick_options() {
  RunOptions options;
  options.sampling.warmup = 1;
  options.sampling.warmup_ms = 0;
  options.sampling.min_samples = 5;
  options.sampling.max_samples = 5;
  options.sampling.max_time_s = 1.0;
  return options;
}

// Every row of `problem` through the runner: ok, its measured peak, split and kept bytes equal to the
// generic model fed by the implementation's costs and the GPU's parameters, the pool's own
// high-water mark at least the tracked peak, and its check against float64 passed.
void expect_rows_match_model_and_float64(const Problem& problem, const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    SCOPED_TRACE(row.implementation() + " " + problem.describe());
    ASSERT_EQ(row.status, Status::ok) << row.reason;
    EXPECT_EQ(row.backend, "cuda");
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
    EXPECT_FALSE(row.device.empty());
    ASSERT_TRUE(row.check.has_value()) << row.not_checked;
    EXPECT_EQ(row.check->reference, "float64");
    EXPECT_TRUE(row.check->passed()) << row.check->max_rel_err << " > " << row.check->tolerance;
    // O, dQ, dK and dV of layer 0 each compared (small problems: whole K/V groups within budget).
    ASSERT_EQ(row.check->tensors.size(), 4u);
    EXPECT_EQ(row.check->tensors[0].name, "O");
    EXPECT_EQ(row.check->tensors[1].name, "dQ");
    EXPECT_EQ(row.check->tensors[2].name, "dK");
    EXPECT_EQ(row.check->tensors[3].name, "dV");
    EXPECT_TRUE(row.check->not_compared.empty()) << row.check->not_compared;
    for (const CheckedTensor& tensor : row.check->tensors)
      EXPECT_LE(tensor.rel_err, row.check->tolerance) << tensor.name;
  }
}

TEST(CudaDevice, MeasuredMemoryMatchesModel) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem problem;
  problem.batch = 2;
  problem.heads = 3;
  problem.seq = 300;
  problem.head_dim = 64;
  problem.layers = 3;
  problem.causal = true;
  problem.dtype = Dtype::bf16;
  std::unique_ptr<Device> device = open_cuda();
  const auto implementations = select_implementations(cuda_entry(), {"standard", "v1", "v2", "checkpoint"});
  const std::vector<Row> rows = Runner(*device, quick_options()).run(problem, pointers(implementations));
  ASSERT_EQ(rows.size(), kAllVariants.size());
  expect_rows_match_model_and_float64(problem, rows);
}

// The workloads beyond square attention (docs/workloads.md) through the runner: GQA and MQA native
// and repeated (expand_kv), N_k ≠ N both ways with the bottom-right causal mask (N > N_k leaves rows
// that see no key), dropout alone and with all of them; odd lengths spanning several tiles; L = 2
// independent layers. Every row's layer 0 is checked against float64, O, dQ, dK and dV apart (with
// dropout on the same Philox mask), and its memory equals the model to the byte (v2's three fp32
// accumulators, naive GQA's dKx and dVx). Every implementation runs every shape: v2 on the wgmma
// kernels on a Hopper GPU in bf16/fp16 and on the mma.sync kernels elsewhere, v2.mma on the mma.sync
// kernels everywhere, both on the SIMT kernels in fp32. The traps of those kernels: N = 1, prime
// lengths, N_k > N and N_k < N causal (a whole query tile that sees no key), MQA with many query
// heads per K/V head (wgmma splits them over the grid, their dK and dV shares added into the same
// rows), dropout with G = H and with GQA.
struct WorkloadCase {
  const char* name;
  int64_t heads, kv_heads, seq, seq_k, head_dim;
  bool causal, expand_kv;
  double dropout;
  Dtype dtype;
};

void PrintTo(const WorkloadCase& c, std::ostream* os) { *os << c.name; }

class CudaWorkloads : public testing::TestWithParam<WorkloadCase> {};

TEST_P(CudaWorkloads, EveryVariantMatchesModelAndFloat64) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const WorkloadCase& c = GetParam();
  Problem problem;
  problem.batch = 2;
  problem.heads = c.heads;
  problem.kv_heads = c.kv_heads;
  problem.seq = c.seq;
  problem.seq_kv = c.seq_k;
  problem.head_dim = c.head_dim;
  problem.layers = 2;
  problem.causal = c.causal;
  problem.expand_kv = c.expand_kv;
  problem.dropout = c.dropout;
  problem.dtype = c.dtype;
  std::unique_ptr<Device> device = open_cuda();
  const auto implementations =
      select_implementations(cuda_entry(), {"standard", "v1", "v2", "checkpoint", "v2.mma", "v2.stored"});
  const std::vector<Row> rows = Runner(*device, quick_options()).run(problem, pointers(implementations));
  ASSERT_EQ(rows.size(), 6u);
  // Every kernel family runs these workloads at d = 64 and 128; d = 96, 192 and 256 only the wgmma
  // kernels (bf16/fp16, cc 9.0).
  const bool wgmma = c.dtype != Dtype::fp32 && cuda::compute_capability(0) == 90;
  auto v2_runs = [&](const Row& row) {
    if (c.head_dim == 64 || c.head_dim == 128) return true;
    return (row.implementation() == "v2" || row.implementation() == "v2.stored") && wgmma;
  };
  std::vector<Row> ran;
  for (const Row& row : rows) {
    if (row.variant == Variant::v2 && !v2_runs(row)) {
      EXPECT_EQ(row.status, Status::skipped) << row.implementation();
      EXPECT_NE(row.reason.find("head_dim"), std::string::npos) << row.reason;
      continue;
    }
    ran.push_back(row);
  }
  expect_rows_match_model_and_float64(problem, ran);
}

std::string workload_name(const testing::TestParamInfo<WorkloadCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(
    Gpu, CudaWorkloads,
    testing::Values(
        WorkloadCase{"gqa_nk_less_causal_bf16_d64", 4, 2, 300, 200, 64, true, false, 0.0, Dtype::bf16},
        WorkloadCase{"gqa_nk_less_causal_bf16_d64_expand", 4, 2, 300, 200, 64, true, true, 0.0, Dtype::bf16},
        WorkloadCase{"mqa_nk_more_fp16_d128", 4, 1, 150, 333, 128, false, false, 0.0, Dtype::fp16},
        WorkloadCase{"mqa_nk_more_causal_fp16_d128_expand", 4, 1, 150, 333, 128, true, true, 0.0, Dtype::fp16},
        WorkloadCase{"mha_cross_causal_bf16_d128", 2, 2, 257, 129, 128, true, false, 0.0, Dtype::bf16},
        // B·H·N = 262 rows: the softmax's last block of warps (8 rows each) has warps past the last row.
        WorkloadCase{"one_head_odd_rows_nk_more_causal_bf16_d64", 1, 1, 131, 200, 64, true, false, 0.0, Dtype::bf16},
        // Rows of 20,000 keys (16-bit) and 9,000 (fp32): the softmax's 1024-thread rows (16-bit rows
        // past 16K up to 32K, fp32 past 8K up to 16K).
        WorkloadCase{"long_keys_causal_bf16_d64", 2, 2, 16, 20000, 64, true, false, 0.0, Dtype::bf16},
        WorkloadCase{"long_keys_fp16_d64", 2, 2, 16, 20000, 64, false, false, 0.0, Dtype::fp16},
        WorkloadCase{"long_keys_fp32_d64", 1, 1, 16, 9000, 64, false, false, 0.0, Dtype::fp32},
        // The d = 64 forward's three-warpgroup blocks, long enough for many key tiles, with GQA and a
        // bottom-right mask shifted by N_k − N.
        WorkloadCase{"gqa_nk_more_causal_bf16_d64_long", 4, 2, 2053, 2200, 64, true, false, 0.0, Dtype::bf16},
        // And with N_k < N: blocks whose first warpgroups' rows see no key while the last one's see
        // the first tile (a warpgroup computes only the tiles its own rows see).
        WorkloadCase{"gqa_nk_less_causal_fp16_d64_long", 4, 2, 2053, 1500, 64, true, false, 0.0, Dtype::fp16},
        WorkloadCase{"dropout_self_causal_bf16_d64", 3, 3, 257, 257, 64, true, false, 0.1, Dtype::bf16},
        WorkloadCase{"dropout_self_fp16_d128", 2, 2, 200, 200, 128, false, false, 0.3, Dtype::fp16},
        WorkloadCase{"dropout_gqa_nk_more_causal_fp16_d128", 4, 2, 130, 190, 128, true, false, 0.2, Dtype::fp16},
        WorkloadCase{"dropout_gqa_expand_bf16_d64", 4, 2, 130, 190, 64, false, true, 0.2, Dtype::bf16},
        WorkloadCase{"gqa_dropout_fp32_d64", 4, 2, 70, 90, 64, true, false, 0.1, Dtype::fp32},
        // The traps of the mma.sync (bf16/fp16) and SIMT (fp32) kernels.
        WorkloadCase{"mqa_n1_causal_fp32_d128", 4, 1, 1, 37, 128, true, false, 0.0, Dtype::fp32},
        WorkloadCase{"mqa_prime_nk_less_causal_fp32_d128", 4, 1, 131, 67, 128, true, false, 0.0, Dtype::fp32},
        WorkloadCase{"gqa_prime_nk_more_causal_fp32_d64", 4, 2, 67, 193, 64, true, false, 0.0, Dtype::fp32},
        WorkloadCase{"dropout_self_causal_fp32_d128", 2, 2, 97, 97, 128, true, false, 0.2, Dtype::fp32},
        WorkloadCase{"dropout_mqa_nk_less_fp32_d64_expand", 4, 1, 83, 61, 64, false, true, 0.1, Dtype::fp32},
        WorkloadCase{"mqa_n1_causal_bf16_d64", 4, 1, 1, 131, 64, true, false, 0.0, Dtype::bf16},
        WorkloadCase{"gqa_prime_nk_less_causal_fp16_d64", 4, 2, 383, 129, 64, true, false, 0.0, Dtype::fp16},
        WorkloadCase{"mqa_prime_nk_more_causal_bf16_d128", 8, 1, 131, 389, 128, true, false, 0.0, Dtype::bf16},
        WorkloadCase{"dropout_mqa_nk_less_causal_bf16_d128", 4, 1, 190, 130, 128, true, false, 0.1, Dtype::bf16},
        WorkloadCase{"dropout_self_n1_fp16_d64", 4, 4, 1, 1, 64, true, false, 0.3, Dtype::fp16},
        WorkloadCase{"dropout_self_prime_fp16_d64", 2, 2, 383, 383, 64, false, false, 0.1, Dtype::fp16},
        // d = 96 on the wgmma kernels (v2.mma and the other GPUs' v2: skipped rows).
        WorkloadCase{"dropout_gqa_nk_less_causal_bf16_d96", 4, 2, 201, 150, 96, true, false, 0.1, Dtype::bf16},
        // d = 192 and 256 on the wgmma kernels, with dropout and without (v2.mma and the other GPUs'
        // v2: skipped rows).
        WorkloadCase{"gqa_prime_nk_less_causal_bf16_d192", 4, 2, 383, 129, 192, true, false, 0.0, Dtype::bf16},
        WorkloadCase{"mqa_nk_more_fp16_d256", 4, 1, 131, 389, 256, false, false, 0.0, Dtype::fp16},
        WorkloadCase{"mqa_nk_more_causal_bf16_d256_expand", 4, 1, 131, 389, 256, true, true, 0.0, Dtype::bf16},
        WorkloadCase{"dropout_self_fp16_d256", 2, 2, 130, 130, 256, true, false, 0.1, Dtype::fp16},
        WorkloadCase{"dropout_gqa_prime_nk_more_bf16_d192", 4, 2, 131, 197, 192, false, false, 0.2, Dtype::bf16},
        WorkloadCase{"dropout_gqa_nk_less_causal_fp16_d256", 4, 2, 201, 150, 256, true, false, 0.1, Dtype::fp16}),
    workload_name);

// A memory limit between v2's and standard's modelled peaks: the pre-flight skips standard, saying
// what it needs, before allocating anything; v2 runs.
TEST(CudaDevice, WhatDoesNotFitIsSkipped) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem problem;
  problem.heads = 4;
  problem.seq = 2048;
  problem.head_dim = 64;
  problem.dtype = Dtype::bf16;
  std::unique_ptr<Device> device = open_cuda();
  const ModelParams params = device->model_params(problem);
  const auto implementations = select_implementations(cuda_entry(), {"standard", "v2"});
  auto model_peak = [&](const Implementation& implementation) {
    return model_memory(problem, implementation.variant(), implementation.costs(problem, params), params).peak_bytes;
  };
  const int64_t standard_peak = model_peak(*implementations[0]);
  const int64_t v2_peak = model_peak(*implementations[1]);
  ASSERT_LT(v2_peak, standard_peak);
  RunOptions options = quick_options();
  options.mem_limit_bytes = v2_peak + (standard_peak - v2_peak) / 2;
  const std::vector<Row> rows = Runner(*device, options).run(problem, pointers(implementations));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, Status::skipped);
  EXPECT_NE(rows[0].reason.find("needs"), std::string::npos) << rows[0].reason;
  EXPECT_EQ(rows[1].status, Status::ok) << rows[1].reason;
  EXPECT_EQ(rows[1].measured.peak_bytes, v2_peak);
}

// OutOfMemory where the run cannot go on, and the device usable afterwards: a ledger limit below the
// cuBLAS workspace refuses the space itself; a limit below standard's peak stops its layer stack
// midway; the GPU refusing an impossible size is OutOfMemory too, not a sticky CUDA error.
TEST(CudaDevice, OutOfMemoryLeavesTheDeviceUsable) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem problem;
  problem.heads = 4;
  problem.seq = 1024;
  problem.head_dim = 64;
  problem.dtype = Dtype::bf16;
  std::unique_ptr<Device> device = open_cuda();
  std::unique_ptr<Implementation> standard = implementation("standard");
  const int64_t elements = problem.q_elements();
  const int64_t x_bytes = elements * element_bytes(problem.dtype);

  {
    MemoryLedger ledger(1 << 20);
    EXPECT_THROW(device->open_space(ledger), OutOfMemory);
    EXPECT_EQ(ledger.live().total(), 0);
  }
  {
    // Room for the cuBLAS workspace, Q, K, V, dO and the layer's output, not for its kept P.
    const int64_t p_bytes = problem.score_elements() * element_bytes(problem.dtype);
    MemoryLedger ledger(device->model_params(problem).persistent_workspace_bytes + 5 * x_bytes + p_bytes / 2);
    std::unique_ptr<MemorySpace> space = device->open_space(ledger);
    std::vector<RawBuffer> tensors;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      tensors.emplace_back(*space, Tag::input, x_bytes);
      device->fill_normal(problem.dtype, tensors.back().data(), elements, seed);
    }
    const LayerData layer{{tensors[0].data(), tensors[1].data(), tensors[2].data()}, tensors[3].data()};
    LayerStack stack(problem, *standard, *device, *space);
    EXPECT_THROW(stack.forward({&layer, 1}), OutOfMemory);
  }
  {
    MemoryLedger ledger;
    std::unique_ptr<MemorySpace> space = device->open_space(ledger);
    const int64_t more_than_free = device->available_bytes().value_or(0) + (int64_t{16} << 30);
    EXPECT_THROW((RawBuffer(*space, Tag::workspace, more_than_free)), OutOfMemory);
    EXPECT_EQ(ledger.live().total(), device->model_params(problem).persistent_workspace_bytes);
    device->synchronize();
  }
  const std::vector<float> Q(elements, 0.5f), K(elements, 0.25f), V(elements, 1.0f), dO(elements, 0.25f);
  const Runner::Pass pass = Runner(*device, RunOptions{}).run_once(problem, *standard, {Q, K, V, dO});
  EXPECT_TRUE(std::all_of(pass.O.begin(), pass.O.end(), [](float x) { return std::isfinite(x); }));
}

// A variant run without standard beside it is still checked, against the float64 reference.
TEST(CudaDevice, AVariantAloneIsCheckedAgainstFloat64) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem problem;
  problem.heads = 2;
  problem.seq = 256;
  problem.head_dim = 64;
  problem.layers = 2;
  problem.dtype = Dtype::fp16;
  std::unique_ptr<Device> device = open_cuda();
  for (const char* name : {"v1", "v2", "checkpoint"}) {
    SCOPED_TRACE(name);
    const auto implementations = select_implementations(cuda_entry(), {name});
    const std::vector<Row> rows = Runner(*device, quick_options()).run(problem, pointers(implementations));
    ASSERT_EQ(rows.size(), 1u);
    ASSERT_EQ(rows[0].status, Status::ok) << rows[0].reason;
    ASSERT_TRUE(rows[0].check.has_value()) << rows[0].not_checked;
    EXPECT_EQ(rows[0].check->reference, "float64");
    EXPECT_TRUE(rows[0].check->passed()) << rows[0].check->max_rel_err << " > " << rows[0].check->tolerance;
  }
}

// v2's kernels are built for d = 64, 128 (and 96 on wgmma): d = 80 is a skipped v2 row with the reason, and the
// materialising variants run and pass on the same problem.
TEST(CudaDevice, UnsupportedHeadDimSkipsOnlyV2) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem problem;
  problem.heads = 2;
  problem.seq = 128;
  problem.head_dim = 80;
  problem.dtype = Dtype::bf16;
  std::unique_ptr<Device> device = open_cuda();
  const auto implementations = select_implementations(cuda_entry(), {"standard", "v2", "checkpoint"});
  const std::vector<Row> rows = Runner(*device, quick_options()).run(problem, pointers(implementations));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].status, Status::skipped);
  EXPECT_NE(rows[1].reason.find("head_dim"), std::string::npos) << rows[1].reason;
  for (const Row* row : {&rows[0], &rows[2]}) {
    SCOPED_TRACE(row->implementation());
    EXPECT_EQ(row->status, Status::ok) << row->reason;
    ASSERT_TRUE(row->check.has_value()) << row->not_checked;
    EXPECT_TRUE(row->check->passed());
  }
}

// The metadata block and the row annotation name the GPU.
TEST(CudaDevice, DescribesTheGpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::unique_ptr<Device> device = open_cuda();
  nlohmann::ordered_json meta;
  device->describe(meta);
  ASSERT_TRUE(meta.contains("gpu"));
  for (const char* key : {"name", "compute_capability", "memory_bytes", "multiprocessors", "l2_bytes",
                          "driver_version", "runtime_version", "uuid", "index"})
    EXPECT_TRUE(meta["gpu"].contains(key)) << key;
  // nvidia-smi's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, 4 + 32 hex digits + 4 dashes.
  const std::string uuid = meta["gpu"]["uuid"].get<std::string>();
  EXPECT_EQ(uuid.size(), 40u) << uuid;
  EXPECT_EQ(uuid.rfind("GPU-", 0), 0u) << uuid;
  EXPECT_EQ(meta["gpu"]["index"], 0);
  Row row;
  device->annotate(row);
  EXPECT_EQ(row.device, meta["gpu"]["name"].get<std::string>());
  EXPECT_EQ(row.device_index, 0);
  EXPECT_EQ(device->cache_flush_bytes(), 2 * meta["gpu"]["l2_bytes"].get<int64_t>());
}

// ---- without a GPU ----

TEST(CudaDevice, OpeningWithoutADeviceIsAUsageError) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(open_cuda(), UsageError);
}

// The model of the GPU answers without one: the cuBLAS workspace, gradients in the storage dtype,
// 1 to 4 input sets, and each variant's per-layer workspace in closed form: v2's backward the row dot
// and three fp32 accumulators (dQ at the query heads, dK and dV at the kernels' K/V heads, the H
// repeated ones under expand_kv), the materialising variants' naive GQA dKx and dVx as extra
// gradients in the storage dtype, checkpoint's repeated K and V as workspace in each pass.
TEST(CudaDevice, ModelAnswersWithoutOpeningTheDevice) {
  Problem problem;
  problem.batch = 2;
  problem.heads = 4;
  problem.seq = 512;
  problem.head_dim = 64;
  problem.dtype = Dtype::bf16;
  const ModelParams params = cuda_entry().offline_params(problem, DeviceOptions{});
  EXPECT_EQ(params.persistent_workspace_bytes, int64_t{32} << 20);
  EXPECT_EQ(params.gradient_element_bytes, 2);
  EXPECT_GE(params.input_sets, 1);
  EXPECT_LE(params.input_sets, 4);

  const auto implementations = cuda_entry().implementations();
  ASSERT_GE(implementations.size(), 6u);  // the variants' defaults, v2.mma, v2.stored; cudnn has its own tests
  struct Expected {
    const char* name;
    const char* variant;
    int64_t forward, backward, extra_grad;
  };
  // G = 2 of H = 4 with N_k = 384 ≠ N, natively and expanded.
  for (bool expand : {false, true}) {
    Problem p = problem;
    p.kv_heads = 2;
    p.seq_kv = 384;
    p.expand_kv = expand;
    SCOPED_TRACE(p.describe());
    const int64_t s = p.score_elements() * 2;
    const int64_t r = p.row_elements() * 4;
    const int64_t a = p.q_elements() * 4;
    const int64_t x = p.expanded_kv_elements();  // [B,H,N_k,d]
    const int64_t k = (expand ? x : p.kv_elements()) * 4;
    const int64_t repeated_kv = expand ? 2 * x * 2 : 0;  // checkpoint's Kx, Vx in each pass
    const int64_t repeated_grads = expand ? 2 * x * 2 : 0;  // dKx, dVx before their group sums
    const Expected expected[] = {{"standard", "standard", 0, s, repeated_grads},
                                 {"v1", "v1", s, s, repeated_grads},
                                 {"v2", "v2", 0, r + a + 2 * k, 0},
                                 {"checkpoint", "checkpoint", s + repeated_kv, 2 * s + repeated_kv, repeated_grads},
                                 {"v2.mma", "v2", 0, r + a + 2 * k, 0}};
    for (size_t i = 0; i < std::size(expected); ++i) {
      SCOPED_TRACE(expected[i].name);
      EXPECT_EQ(implementations[i]->name(), expected[i].name);
      EXPECT_EQ(to_string(implementations[i]->variant()), expected[i].variant);
      const LayerCosts costs = implementations[i]->costs(p, params);
      EXPECT_EQ(costs.forward_workspace_bytes, expected[i].forward);
      EXPECT_EQ(costs.backward_workspace_bytes, expected[i].backward);
      EXPECT_EQ(costs.backward_extra_grad_bytes, expected[i].extra_grad);
    }
  }
  // G = H: on a Hopper GPU v2.stored's wgmma kernels store dK and dV in the storage dtype themselves
  // (one block holds each key's whole sum), so only D and dQ's accumulator remain; v2 and v2.mma,
  // and v2.stored on any other GPU or with GQA (above), add them into fp32 accumulators.
  {
    ASSERT_GE(implementations.size(), 6u);
    EXPECT_EQ(implementations[5]->name(), "v2.stored");
    const int64_t r = problem.row_elements() * 4;
    const int64_t a = problem.q_elements() * 4;
    const int64_t k = problem.kv_elements() * 4;
    const bool hopper = cuda::device_count() > 0 && cuda::compute_capability(0) == 90;
    EXPECT_EQ(implementations[2]->costs(problem, params).backward_workspace_bytes, r + a + 2 * k);
    EXPECT_EQ(implementations[4]->costs(problem, params).backward_workspace_bytes, r + a + 2 * k);
    EXPECT_EQ(implementations[5]->costs(problem, params).backward_workspace_bytes, hopper ? r + a : r + a + 2 * k);
    Problem gqa = problem;
    gqa.kv_heads = 2;
    EXPECT_EQ(implementations[5]->costs(gqa, params).backward_workspace_bytes,
              r + a + 2 * gqa.kv_elements() * 4);
  }
  // Square, with dropout: checkpoint recomputes P̃ beside P and dP.
  Problem dropout = problem;
  dropout.dropout = 0.1;
  const int64_t s = dropout.score_elements() * 2;
  EXPECT_EQ(implementations[3]->costs(dropout, params).backward_workspace_bytes, 3 * s);
}

}  // namespace
}  // namespace flashbench
