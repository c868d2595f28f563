// The context-parallel (ring) model: one device's peak and the bytes it sends, against schedules
// counted by hand for N = 8 split over P = 2 and 4 devices, every variant, causal and not; P = 1
// equal to the single-device model for the CPU's and CUDA's implementations; bad P; fit over the
// split's multiples of N.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "flashbench/core/errors.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/model/model.hpp"
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

// P = 2: n = 4 local rows. One local [1,1,4,4] fp32 tensor (Q, K, V, O, dO, dQ, dK, dV, a K or V
// block, a dK or dV sum) is 64 bytes, a [1,1,4] fp32 row vector 16, the inputs Q, K, V and dO
// 4·64 = 256, the gradients dQ, dK, dV 3·64 = 192.
//   forward ring:  1 K, V pair in flight (P - 1 = 1) 2·64 + block result O_s, LSE_s 64 + 16
//                  + running O, LSE in fp32 64 + 16                                   = 288
//   backward ring: 1 K, V pair 128 + 2 dK sums and 2 dV sums 4·64 + dQ sum 64          = 448
//   sent: forward 1 K and 1 V block = 128; backward 128 + 2 dK and 2 dV sums 256 = 384
//   (checkpoint: + its recomputed forward's 128 = 512)
//   kept: standard P [1,1,4,8] = 128; v1 S 128 + m, l 2·16 = 160; v2 O 64 + LSE 16 = 80
// Moments (L = 1): forward end = inputs + output + kept beyond the output + forward ring;
// backward = inputs + kept + O (activation, beside v2's kept O) + dQ, dK, dV + backward ring.
TEST(ContextParallel, HandCountTwoDevices) {
  // standard: forward 256 + 64 + 128 + 288 = 736; backward 256 + 128 + 64 + 192 + 448 = 1088
  expect_hand_count(2, {Variant::standard, 128, 1088, Phase::bwd, 128, 384});
  // v1: forward 256 + 64 + 160 + 288 = 768; backward 256 + 160 + 64 + 192 + 448 = 1120
  expect_hand_count(2, {Variant::v1, 160, 1120, Phase::bwd, 128, 384});
  // v2: forward 256 + 64 (O) + 16 + 288 = 624; backward 256 + 80 + 192 + 448 = 976
  expect_hand_count(2, {Variant::v2, 80, 976, Phase::bwd, 128, 384});
  // checkpoint: forward 256 + 64 + 288 = 608; backward 256 + 64 + 192 + recomputed P's other
  // [4,4] block 64 + max(288, 448) = 1024
  expect_hand_count(2, {Variant::checkpoint, 0, 1024, Phase::bwd, 128, 512});
}

// P = 4: n = 2. A local [1,1,2,4] fp32 tensor is 32 bytes, a row vector 8, the inputs 4·32 = 128,
// the gradients 3·32 = 96.
//   forward ring:  2 K, V pairs 4·32 + O_s, LSE_s 32 + 8 + running O, LSE 32 + 8       = 208
//   backward ring: 2 K, V pairs 128 + 2 dK and 2 dV sums 128 + dQ sum 32               = 288
//   sent: forward 3 K and 3 V blocks = 192; backward 192 + 4 dK and 4 dV sums 256 = 448
//   (checkpoint 640)
//   kept: standard P [1,1,2,8] = 64; v1 64 + 2·8 = 80; v2 32 + 8 = 40
TEST(ContextParallel, HandCountFourDevices) {
  // standard: forward 128 + 32 + 64 + 208 = 432; backward 128 + 64 + 32 + 96 + 288 = 608
  expect_hand_count(4, {Variant::standard, 64, 608, Phase::bwd, 192, 448});
  // v1: forward 128 + 32 + 80 + 208 = 448; backward 128 + 80 + 32 + 96 + 288 = 624
  expect_hand_count(4, {Variant::v1, 80, 624, Phase::bwd, 192, 448});
  // v2: forward 128 + 32 + 8 + 208 = 376; backward 128 + 40 + 96 + 288 = 552
  expect_hand_count(4, {Variant::v2, 40, 552, Phase::bwd, 192, 448});
  // checkpoint: forward 128 + 32 + 208 = 368; backward 128 + 32 + 96 + recomputed P's three other
  // [2,2] blocks 48 + max(208, 288) = 592
  expect_hand_count(4, {Variant::checkpoint, 0, 592, Phase::bwd, 192, 640});
}

// In 16-bit storage the blocks that travel and O_s halve; the sums, the running O and the dQ sum
// stay fp32. P = 2, bf16: a K or V block 32 bytes, an fp32 tensor 64, a row vector 16.
TEST(ContextParallel, SixteenBitBlocksTravelInTheStorageDtype) {
  Problem p = small(false);
  p.dtype = Dtype::bf16;
  const RingBytes ring = ring_bytes(p, 2, Variant::v2);
  EXPECT_EQ(ring.forward_ring_bytes, 2 * 32 + (32 + 16) + (64 + 16));
  EXPECT_EQ(ring.backward_ring_bytes, 2 * 32 + 4 * 64 + 64);
  EXPECT_EQ(ring.forward_sent_bytes, 2 * 32);
  EXPECT_EQ(ring.backward_sent_bytes, 2 * 32 + 2 * 2 * 64);
}

// With a workspace of the device's own the forward can be the peak: a step call's workspace is the
// implementation's for the local problem, added to the ring's.
TEST(ContextParallel, StepWorkspaceAddsToTheRing) {
  const LayerCosts costs{.forward_workspace_bytes = 1000, .backward_workspace_bytes = 10};
  const ContextParallelModel m = model_context_parallel(small(false), 2, Variant::v2, costs, kBareDevice);
  // forward 624 + 1000 = 1624 > backward 976 + 10
  EXPECT_EQ(m.per_device.peak_bytes, 1624);
  EXPECT_EQ(m.per_device.peak_phase, Phase::fwd);
  EXPECT_EQ(m.per_device.by_tag[Tag::workspace], 1000 + 288);
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

// The ring is modelled for G = H, N_k = N without dropout; the rest is refused by name (P > 1), and
// P = 1 is the single-device model of any workload.
TEST(ContextParallel, UnmodelledWorkloadsAreRefusedByName) {
  Problem gqa = small(false);
  gqa.heads = 4;
  gqa.kv_heads = 2;
  Problem cross = small(false);
  cross.seq_kv = 16;
  Problem dropped = small(false);
  dropped.dropout = 0.1;
  for (const auto& [problem, named] : {std::pair{gqa, "G=2"}, std::pair{cross, "Nk=16"}, std::pair{dropped, "dropout=0.1"}}) {
    SCOPED_TRACE(named);
    EXPECT_NO_THROW(validate_context_parallel(problem, 1));
    try {
      validate_context_parallel(problem, 2);
      ADD_FAILURE() << "expected a UsageError";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("--cp 2: the ring is modelled for G = H and N_k = N without dropout "
                                                   "(p = 0); this problem has ") + named);
    }
  }
  // N_k given as N is square: the local problem's keys are its n rows.
  Problem explicit_keys = small(true);
  explicit_keys.seq_kv = 8;
  explicit_keys.kv_heads = 1;
  const Problem local = local_problem(explicit_keys, 2);
  EXPECT_EQ(local.seq, 4);
  EXPECT_EQ(local.key_seq(), 4);
  EXPECT_TRUE(local.square());
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
