// The context-parallel (ring) model: one device's peak and the bytes it sends, against schedules
// counted by hand for N = 8 split over P = 2 and 4 devices, every variant, causal and not; P = 1
// equal to the single-device model for the CPU's and CUDA's implementations; bad P; fit over the
// split's multiples of N.
#include <gtest/gtest.h>

#include <string>

#include "flashbench/errors.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/model.hpp"
#include "support/cpu.hpp"

namespace flashbench {
namespace {

// B = H = 1, N = 8, d = 4, fp32, one layer; a device with no workspace of its own, so that every
// byte below is the schedule's.
Problem small(bool causal) {
  Problem p;
  p.batch = 1;
  p.heads = 1;
  p.seq = 8;
  p.head_dim = 4;
  p.layers = 1;
  p.causal = causal;
  return p;
}

constexpr ModelParams kBareDevice{.threads = 0, .input_sets = 1, .persistent_workspace_bytes = 0,
                                  .gradient_element_bytes = 4};

struct HandCount {
  Variant variant;
  int64_t kept;           // per layer, on one device [bytes]
  int64_t peak;           // one device's [bytes]
  Phase phase;
  int64_t sent_forward;   // per layer [bytes]
  int64_t sent_backward;  // per layer [bytes]
};

void expect_hand_count(int64_t ranks, const HandCount& expected) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(std::string(to_string(expected.variant)) + (causal ? " causal" : "") + " P=" + std::to_string(ranks));
    const ContextParallelModel m = model_context_parallel(small(causal), ranks, expected.variant, LayerCosts{}, kBareDevice);
    EXPECT_EQ(m.local.seq, 8 / ranks);
    EXPECT_EQ(m.layer.kept_bytes, expected.kept);
    EXPECT_EQ(m.per_device.peak_bytes, expected.peak);
    EXPECT_EQ(m.per_device.by_tag.total(), expected.peak);
    EXPECT_EQ(m.per_device.peak_phase, expected.phase);
    EXPECT_EQ(m.ring.forward_sent_bytes, expected.sent_forward);
    EXPECT_EQ(m.ring.backward_sent_bytes, expected.sent_backward);
    EXPECT_EQ(m.stack_sent_bytes, expected.sent_forward + expected.sent_backward);
  }
}

// P = 2: n = 4 local rows. One local [1,1,4,4] fp32 tensor (X, O, dX, an X block, a dK+dV sum) is
// 64 bytes, a [1,1,4] fp32 row vector 16, the inputs X0 and dO 2·64 = 128.
//   forward ring:  1 X block in flight (P - 1 = 1) 64 + block result O_j, LSE_j 64 + 16
//                  + running O, LSE in fp32 64 + 16                                   = 224
//   backward ring: 1 X block 64 + 2 dK+dV sums 128 + dQ sum 64                        = 256
//   sent: forward 1 X block = 64; backward 1 X block + 2 dK+dV sums = 192 (checkpoint: + its
//   recomputed forward's 64 = 256)
//   kept: standard P [1,1,4,8] = 128; v1 S 128 + m, l 2·16 = 160; v2 O 64 + LSE 16 = 80
// Moments (L = 1): forward end = inputs + output + kept beyond the output + forward ring;
// backward = inputs + kept (+ O for v2) + dX_0 64 + backward ring.
TEST(ContextParallel, HandCountTwoDevices) {
  // standard: forward 128 + 64 + 128 + 224 = 544; backward 128 + 128 + 64 + 256 = 576
  expect_hand_count(2, {Variant::standard, 128, 576, Phase::bwd, 64, 192});
  // v1: forward 128 + 64 + 160 + 224 = 576; backward 128 + 160 + 64 + 256 = 608
  expect_hand_count(2, {Variant::v1, 160, 608, Phase::bwd, 64, 192});
  // v2: forward 128 + 64 (O) + 16 + 224 = 432; backward 128 + 80 + 64 + 256 = 528
  expect_hand_count(2, {Variant::v2, 80, 528, Phase::bwd, 64, 192});
  // checkpoint: forward 128 + 64 + 224 = 416; backward 128 + 64 + recomputed P's other [4,4]
  // block 64 + max(224, 256) = 512
  expect_hand_count(2, {Variant::checkpoint, 0, 512, Phase::bwd, 64, 256});
}

// P = 4: n = 2. A local [1,1,2,4] fp32 tensor is 32 bytes, a row vector 8, the inputs 64.
//   forward ring:  2 X blocks 64 + O_j, LSE_j 32 + 8 + running O, LSE 32 + 8          = 144
//   backward ring: 2 X blocks 64 + 2 dK+dV sums 64 + dQ sum 32                         = 160
//   sent: forward 3 X blocks = 96; backward 3 X blocks + 4 dK+dV sums = 224 (checkpoint 320)
//   kept: standard P [1,1,2,8] = 64; v1 64 + 2·8 = 80; v2 32 + 8 = 40
TEST(ContextParallel, HandCountFourDevices) {
  // standard: forward 64 + 32 + 64 + 144 = 304; backward 64 + 64 + 32 + 160 = 320
  expect_hand_count(4, {Variant::standard, 64, 320, Phase::bwd, 96, 224});
  // v1: forward 64 + 32 + 80 + 144 = 320; backward 64 + 80 + 32 + 160 = 336
  expect_hand_count(4, {Variant::v1, 80, 336, Phase::bwd, 96, 224});
  // v2: forward 64 + 32 + 8 + 144 = 248; backward 64 + 40 + 32 + 160 = 296
  expect_hand_count(4, {Variant::v2, 40, 296, Phase::bwd, 96, 224});
  // checkpoint: forward 64 + 32 + 144 = 240; backward 64 + 32 + recomputed P's three other [2,2]
  // blocks 48 + max(144, 160) = 304
  expect_hand_count(4, {Variant::checkpoint, 0, 304, Phase::bwd, 96, 320});
}

// With a workspace of the device's own the forward can be the peak: a step call's workspace is the
// implementation's for the local problem, added to the ring's.
TEST(ContextParallel, StepWorkspaceAddsToTheRing) {
  const LayerCosts costs{.forward_workspace_bytes = 1000, .backward_workspace_bytes = 10};
  const ContextParallelModel m = model_context_parallel(small(false), 2, Variant::v2, costs, kBareDevice);
  // forward 432 + 1000 = 1432 > backward 528 + 10
  EXPECT_EQ(m.per_device.peak_bytes, 1432);
  EXPECT_EQ(m.per_device.peak_phase, Phase::fwd);
  EXPECT_EQ(m.per_device.by_tag[Tag::workspace], 1000 + 224);
}

void expect_same(const ModelledMemory& a, const ModelledMemory& b) {
  EXPECT_EQ(a.peak_bytes, b.peak_bytes);
  EXPECT_EQ(a.kept_bytes, b.kept_bytes);
  EXPECT_EQ(a.peak_phase, b.peak_phase);
  for (Tag tag : kAllTags) EXPECT_EQ(a.by_tag[tag], b.by_tag[tag]) << to_string(tag);
}

// --cp 1 is the single-device model exactly, for both devices' implementations.
TEST(ContextParallel, OneDeviceIsTheSingleDeviceModel) {
  for (const char* backend : {"cpu", "cuda"}) {
    const DeviceEntry& device = registry().device(backend);
    for (Dtype dtype : {Dtype::fp32, Dtype::bf16})
      for (bool causal : {false, true})
        for (int64_t layers : {1, 3})
          for (Variant variant : kAllVariants) {
            Problem p = small(causal);
            p.seq = 1023;  // odd: P = 1 splits nothing, so N needs no multiple
            p.heads = 3;
            p.layers = layers;
            p.dtype = dtype;
            SCOPED_TRACE(std::string(backend) + " " + p.describe() + " " + std::string(to_string(variant)));
            const ModelParams params = device.offline_params(p, DeviceOptions{.threads = 2});
            const LayerCosts costs =
                select_implementations(device, {std::string(to_string(variant))}).front()->costs(p, params);
            const ContextParallelModel m = model_context_parallel(p, 1, variant, costs, params);
            expect_same(m.per_device, model_memory(p, variant, costs, params));
            EXPECT_EQ(m.stack_sent_bytes, 0);
            EXPECT_EQ(m.ring.forward_ring_bytes + m.ring.backward_ring_bytes + m.ring.recompute_rows_bytes, 0);
            expect_same(model_source(device, DeviceOptions{.threads = 2}, 1).stack(p, variant),
                        model_source(device, DeviceOptions{.threads = 2}).stack(p, variant));
          }
  }
}

// N = 8, P = 2, chunks of 2 rows: zig-zag gives device 0 rows 0,1,6,7 (1 + 2 + 7 + 8 = 18 pairs) and
// device 1 rows 2..5 (3 + 4 + 5 + 6 = 18); contiguous rows 0..3 (10) and 4..7 (26).
// P = 4, chunks of 1 row: zig-zag rows {0,7} 1 + 8, {1,6} 2 + 7, {2,5} 3 + 6, {3,4} 4 + 5: 9 each;
// contiguous {0,1} 3, {2,3} 7, {4,5} 11, {6,7} 15.
TEST(ContextParallel, ZigZagBalancesTheCausalPairs) {
  EXPECT_EQ(causal_pairs(8, 2, 0, SeqSplit::zigzag), 18);
  EXPECT_EQ(causal_pairs(8, 2, 1, SeqSplit::zigzag), 18);
  EXPECT_EQ(causal_pairs(8, 2, 0, SeqSplit::contiguous), 10);
  EXPECT_EQ(causal_pairs(8, 2, 1, SeqSplit::contiguous), 26);
  for (int64_t rank = 0; rank < 4; ++rank) EXPECT_EQ(causal_pairs(8, 4, rank, SeqSplit::zigzag), 9);
  const int64_t contiguous[] = {3, 7, 11, 15};
  for (int64_t rank = 0; rank < 4; ++rank) EXPECT_EQ(causal_pairs(8, 4, rank, SeqSplit::contiguous), contiguous[rank]);
  EXPECT_EQ(causal_pairs(8, 1, 0, SeqSplit::zigzag), 36);
}

TEST(ContextParallel, BadSplitsAreUsageErrors) {
  EXPECT_THROW(validate_context_parallel(small(false), 0), UsageError);
  EXPECT_THROW(validate_context_parallel(small(false), -2), UsageError);
  EXPECT_THROW(validate_context_parallel(small(false), 3), UsageError);  // 8 % 3
  EXPECT_NO_THROW(validate_context_parallel(small(false), 8));            // one row each
  EXPECT_THROW(validate_context_parallel(small(true), 8), UsageError);   // zig-zag: 16 chunks of 8 rows
  EXPECT_NO_THROW(validate_context_parallel(small(true), 4));
  Problem odd = small(true);
  odd.seq = 7;
  EXPECT_NO_THROW(validate_context_parallel(odd, 1));
  try {
    validate_context_parallel(small(true), 8);
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--cp 8: N = 8 must be a multiple of 16 (the zig-zag split's 2P = 16 chunks of equal length)");
  }
}

// On a real device's model a split lowers one device's peak, the more devices the lower.
TEST(ContextParallel, SplittingLowersTheDevicePeak) {
  Problem p = small(true);
  p.seq = 1 << 16;
  p.heads = 16;
  p.head_dim = 128;
  p.layers = 4;
  p.dtype = Dtype::bf16;
  const DeviceEntry& cuda = registry().device("cuda");
  for (Variant variant : kAllVariants) {
    SCOPED_TRACE(std::string(to_string(variant)));
    int64_t fewer = model_source(cuda, {}).stack(p, variant).peak_bytes;
    for (int64_t ranks : {2, 4, 8}) {
      const int64_t split = model_source(cuda, {}, ranks).stack(p, variant).peak_bytes;
      EXPECT_LT(split, fewer) << ranks;
      fewer = split;
    }
  }
}

// fit --cp: the largest multiple of P (2P causal) that fits, and the next multiple does not.
TEST(ContextParallel, FitSearchesMultiplesOfTheSplit) {
  Problem p = small(true);
  p.heads = 8;
  p.head_dim = 64;
  const int64_t budget = int64_t{2} << 30;
  for (int64_t ranks : {2, 4}) {
    const ModelSource model = testing::cpu_model(2);
    const ModelSource split = model_source(registry().device("cpu"), DeviceOptions{.threads = 2}, ranks);
    for (Variant variant : kAllVariants) {
      SCOPED_TRACE(std::string(to_string(variant)) + " P=" + std::to_string(ranks));
      const int64_t step = 2 * ranks;
      const FitResult r = fit_in_budget(split, p, variant, FitAxis::seq, budget, step);
      ASSERT_GT(r.max_value, 0);
      EXPECT_EQ(r.max_value % step, 0);
      Problem at = p, beyond = p;
      at.seq = r.max_value;
      beyond.seq = r.max_value + step;
      EXPECT_EQ(r.model_peak_bytes, split.stack(at, variant).peak_bytes);
      EXPECT_LE(r.model_peak_bytes, budget);
      EXPECT_GT(split.stack(beyond, variant).peak_bytes, budget);
      EXPECT_GT(r.max_value, fit_in_budget(model, p, variant, FitAxis::seq, budget).max_value);
    }
  }
}

}  // namespace
}  // namespace flashbench
