#pragma once
// The tile plans of the sm_90a kernels (flash_wgmma.cu): for each kernel and instance (head dim D,
// dropout), its warpgroups, the rows of its tiles, the stages in flight and the shared memory they
// take, checked against what an H100/H200 block has. And Extents, what the kernels need of a layer
// beyond its tensors. Included by flash_wgmma.cu alone: its names live in that file's anonymous
// namespace, as the kernels do (Extents is in their mangled names).
#include <cstdint>
#include <type_traits>

#include "../flash_common.cuh"
#include "../hopper.cuh"

namespace flashbench::cuda {
namespace {

using namespace hopper;

constexpr int kWarpgroupThreads = 128;

// The k-steps (16 columns each) of a product over the head dim that hold data: a head dim kDim < D
// arrives zero-padded to the tile's D columns (d = 96 in 128), and the steps past kDim would add
// only zeros (at d = 96 a quarter of Sᵀ's and dPᵀ's tensor work and shared-memory reads).
template <int kDim>
constexpr int kDepthSteps = (kDim + 15) / 16;
static_assert(kDepthSteps<96> * 16 == 96 && kDepthSteps<64> * 16 == 64, "head dims of whole k-steps");

// What the kernels need of a layer beyond its tensors (kernels.hpp's LayerShape, in kernel arguments).
// 64-bit rows, where the mma.sync and SIMT kernels' LayerExtents (flash_layer.cuh) has 32-bit ones:
// the 32-bit version changed these kernels' registers, and its speed is not measured yet.
struct Extents {
  int64_t seq;       // N query rows
  int64_t seq_k;     // N_k key rows
  int group_size;    // r: query head h reads K/V head h / r
  bool causal;       // bottom-right: query i sees keys j ≤ i + seq_k − seq
  static Extents of(const LayerShape& shape) {
    return {shape.seq, shape.seq_k, int(shape.group_size), shape.causal};
  }
};

// ---- forward_kernel ---------------------------------------------------------------------------------

// Warpgroups of 64 query rows a forward block: three where they fit, at d = 64 without dropout,
// where 168 registers a thread (384 threads on an SM's 64K) hold O and a 128-key S, and each K/V
// tile then serves 192 queries instead of 128; else two. Three at every N, causal or not: each
// warpgroup computes only the tiles its rows see, and three take 0.89× the time of two at N = 512
// and 0.94× at 1K, causal (measured: docs/journal/w12.md).
template <int D, bool kDropout>
constexpr int kForwardWarpgroups = D == 64 && !kDropout ? 3 : 2;

template <int D, bool kDropout>
struct ForwardPlan {
  static constexpr int kWarpgroups = kForwardWarpgroups<D, kDropout>;
  static constexpr int kRowsPerWarpgroup = 64;
  static constexpr int kQueries = kWarpgroups * kRowsPerWarpgroup;  // per block
  // Keys per K/V tile, the most that two stages of K and V fit beside Q without dropout (fewer tiles
  // share the per-tile costs): 192 in 128-wide tiles (d = 128, and 96 padded to 128), 112 at
  // d = 192, 80 at d = 256 (where O takes D/2 = 128 registers a thread). With dropout the keep flags
  // need room too: 128, and 64 past d = 128.
  static constexpr int kKeys = kDropout ? (D > 128 ? 64 : 128) : D == 128 ? 192 : D == 192 ? 112 : D == 256 ? 80 : 128;
  static constexpr int kThreads = kWarpgroups * kWarpgroupThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kStages = 2;     // K/V tiles in flight
  // Each warpgroup's softmax of a tile under the tensor cores' product of the last one
  // (ForwardMainloop), except at d = 64 (where it takes 0.98–1.06× the time of the loop in turn) and
  // with dropout (1.02–1.07×).
  static constexpr bool kOverlapSoftmax = D != 64 && !kDropout;
  using QTile = SwizzledTile<kQueries, D>;
  using KVTile = SwizzledTile<kKeys, D>;
  // Q; K and V, a buffer each per stage; Q's mbarrier and the rings (one holding K and V in turn, or
  // two when overlapped, K's and V's), each an mbarrier and a count of the warps done with it a
  // stage; slack to reach the first 1024-byte boundary.
  static constexpr int kRingBytes = (8 + 4) * kStages;
  static_assert(kStages % 2 == 0, "the second ring's mbarriers at 8 + kRingBytes stay 8-byte aligned");
  static constexpr int kBarrierBytes = 8 + (kOverlapSoftmax ? 2 : 1) * kRingBytes;
  static constexpr int kSharedBytes = QTile::kBytes + 2 * kStages * KVTile::kBytes + kBarrierBytes + 1024;
  // With dropout, each warpgroup's keep flags of a tile [64 queries][kKeys keys], a byte each, two
  // buffers, rows padded by 4 bytes.
  static constexpr int kMaskLd = kKeys + 4;
  static constexpr int kMaskBytes = kWarpgroups * 2 * kRowsPerWarpgroup * kMaskLd;
  static_assert(kSharedBytes + (kDropout ? kMaskBytes : 0) <= 227 * 1024,
                "an H100/H200 block has at most 227 KiB of shared memory");
};

// ---- backward_kernel --------------------------------------------------------------------------------

template <int D, bool kDropout>
struct BackwardPlan {
  static constexpr int kKeys = 128;    // per block: 2 warpgroups × 64 keys
  // Queries per tile: 128 at d = 64 without dropout, where the elementwise work of a tile is the
  // same as at d = 128 over half the products and larger tiles share the per-tile costs; 80 at
  // d = 128 without dropout, where K and V (the A operands of Sᵀ and dPᵀ) and Kᵀ (dQ's) are read
  // from shared memory once for 80 queries instead of 64 (what fits the registers); else 64.
  static constexpr int kQueries = D == 64 && !kDropout ? 128 : D == 128 && !kDropout ? 80 : 64;
  // 80 queries are no multiple of the 64 rows of a product, so dQ is formed transposed:
  // dQᵀ = Kᵀ·dSᵀ [D][queries], each warpgroup 64 of D's rows, dS stored [queries][keys].
  static constexpr bool kDqTransposed = kQueries == 80;
  // Without dropout (80-query tiles with dQ transposed, and d = 64's 128-query halves), a warpgroup
  // forms tile i's dQ during tile i + 1, once that tile's dS is stored and its dV and dK products are
  // issued. The other warpgroup's half of dS_i is long stored by then, so neither waits for the other
  // at a fixed point of each tile: with a block barrier a tile the two run in lock-step, their
  // softmax phases together, with the tensor cores idle under both (ncu). dQ's accumulators (40
  // transposed, 32 at d = 64) are live beside dK, dV and the A fragments, as in the undeferred order,
  // not beside S and dP. The hand-overs are named barriers (BackwardBarrier::kDsStored, kDsRead).
  static constexpr bool kDqDeferred = !kDropout && (kQueries == 80 || kQueries == 128);
  static constexpr int kThreads = 2 * kWarpgroupThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kStages = 2;    // query tiles (Q, dO, LSE, D) in flight
  using KVTile = SwizzledTile<kKeys, D>;
  using QTile = SwizzledTile<kQueries, D>;
  // dSᵀ [keys][queries], or dS [queries][keys] where dQ is formed transposed.
  using DsTile = std::conditional_t<kDqTransposed, SwizzledTile<kQueries, kKeys>, SwizzledTile<kKeys, kQueries>>;
  // dQ of one query tile in fp32, swizzled as the copy engine reads it for its reduction into the
  // accumulator (boxes of [kDqBoxRows rows][32 columns]).
  using DqTile = SwizzledFloatTile<kQueries, D>;
  static constexpr int kDqBoxRows = kDqTransposed ? kQueries : 64;
  // How the warpgroups share dQ = dS·K of a tile, each product over 64 queries (or, transposed, the
  // 80 of a tile):
  //   D = 128: each takes 64 of its columns over all 128 keys (one [kQueries][D] tile);
  //   128-query tiles (d = 64 without dropout): each takes a 64-query half, every column, over all
  //     128 keys (one [128][D] tile, reduced a half by each warpgroup);
  //   else (d = 64 with dropout): each takes every column over its own 64 keys, a partial tile of
  //     its own, so the L2 adds two partials of each dQ element.
  // The first two need all of dSᵀ before the products (a block barrier a tile). At d = 64 the
  // partials' reductions make the L2 the busiest unit (ncu: 74 % of its crossbar).
  static constexpr bool kDqByQueryHalves = kQueries == 128;
  static constexpr int kDqParts = D == 64 && !kDqByQueryHalves ? 2 : 1;
  // The kernel's dQ paths by query halves (query_row0, column0 = 0, the staged tile written without
  // the dropout instances' hand-formed addresses) hold for this instance only.
  static_assert(!kDqByQueryHalves || (D == 64 && !kDropout), "query halves: d = 64 without dropout");
  static constexpr int kKBytes = KVTile::kBytes;
  static constexpr int kQBytes = QTile::kBytes;
  static constexpr int kDqBytes = kDqParts * DqTile::kBytes;
  // dSᵀ (or dS) twice: a warpgroup may write the next tile's while the other still reads this one's.
  static constexpr int kDsBuffers = 2;
  // mbarriers (K and V; one per stage), the per-stage counts of warps done with it.
  static constexpr int kBarrierBytes = 8 * (1 + kStages) + 4 * kStages;
  // K, V; a Q and a dO tile per stage; dSᵀ or dS; dQ; LSE and D [kQueries] fp32 per stage; the barriers;
  // slack. With
  // dropout, each warpgroup's keep flags of a tile [64 queries][its 64 keys], one byte each, two
  // buffers, rows padded to 68 bytes (the four queries a warp reads at once then fall in distinct
  // banks).
  static constexpr int kMaskLd = kKeys / 2 + 4;
  static constexpr int kMaskBytes = kDropout ? 2 * 2 * kQueries * kMaskLd : 0;
  static constexpr int kSharedBytes = 2 * kKBytes + 2 * kStages * kQBytes + kDsBuffers * DsTile::kBytes + kDqBytes +
                                      2 * kStages * kQueries * 4 + kBarrierBytes + kMaskBytes + 1024;
  static_assert(kSharedBytes <= 227 * 1024, "an H100/H200 block has at most 227 KiB of shared memory");
  // kDqDeferred's first products read a dS tile's bytes from K's tile on (K, then V: read only).
  static_assert(!kDqDeferred || DsTile::kBytes <= 2 * kKBytes, "the first tile's dropped dQ products stay in K and V");
};

// ---- wide_backward_kernel: head dims past 128 ------------------------------------------------------
//
// At d = 192 and 256 backward_kernel's loop does not fit an SM: dK and dV of a warpgroup's 64 keys would take
// D registers a thread (256 at d = 256), and 128 keys of K and V beside two stages of Q and dO 256
// KiB of shared memory. Here a block owns 64 keys, and its two warpgroups split the work by product
// instead of by keys, so that no product is computed twice:
//   warpgroup 0:  Sᵀ = K·Qᵀ,  Pᵀ = exp(Sᵀ − LSE),             dV += Pᵀ·dO,  dQ's first panels
//   warpgroup 1:  dPᵀ = V·dOᵀ,  dSᵀ = Pᵀ ∘ (dPᵀ − D),         dK += dSᵀ·Q,  dQ's last panel(s)
// with dQ = dS·K split by 64-column panels of K. Each warpgroup holds one of dV, dK (D/2 registers a
// thread). Pᵀ passes from warpgroup 0 to 1 through shared memory in fp32, each thread's 32
// accumulator registers in a slot of their own (both warpgroups' threads hold the same elements of a
// 64×64 accumulator, so thread i of one reads exactly what thread i of the other wrote), and dSᵀ as
// the 16-bit tile that both dQ products read. Three named barriers hand them over
// (WideBackwardBarrier: kPReady, kDsReady, kDsFree).
// dQ leaves as [64][32] fp32 boxes reduced into the accumulator by the copy engine; warpgroup 0
// stages its boxes in the exchange (free once dSᵀ is ready), warpgroup 1 in boxes of its own: at
// d = 256 one, which is what 227 KiB leave after K, V and two stages of Q and dO.
template <int D, bool kDropout>
struct WideBackwardPlan {
  static_assert(D == 192 || D == 256, "the by-product split is for head dims past 128");
  static constexpr int kKeys = 64;     // per block, shared by both warpgroups
  static constexpr int kQueries = 64;  // per query tile
  static constexpr int kThreads = 2 * kWarpgroupThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kStages = 2;  // query tiles (Q, dO, LSE, D) in flight
  using KVTile = SwizzledTile<kKeys, D>;
  using QTile = SwizzledTile<kQueries, D>;
  using DsTile = SwizzledTile<kKeys, kQueries>;      // dSᵀ [keys][queries]
  using DqBox = SwizzledFloatTile<kQueries, 32>;     // one box of dQ for the copy engine's reduction
  static constexpr int kPanels = D / 64;             // of dQ's columns
  // Warpgroup 0's panels: 2 of 3 at d = 192, 2 of 4 at d = 256. It waits for dSᵀ while warpgroup 1
  // forms and stores it, so it takes the larger share (and has two box slots to warpgroup 1's one
  // at d = 256).
  static constexpr int kPanels0 = (kPanels + 1) / 2;
  static constexpr int kPanels1 = kPanels - kPanels0;
  static constexpr int kExchangeBytes = 32 * kWarpgroupThreads * 4;  // Pᵀ: 32 fp32 registers a thread
  static constexpr int kBoxSlots0 = kExchangeBytes / DqBox::kBytes;  // 2, in the exchange
  static constexpr int kBoxSlots1 = D == 256 ? 1 : 2;
  static constexpr int kBarrierBytes = 8 * (1 + kStages) + 4 * kStages;
  // With dropout, the keep flags of a tile as bits [64 queries][2 words], drawn and read by
  // warpgroup 0 alone (warpgroup 1 learns them from the sign of Pᵀ in the exchange).
  static constexpr int kMaskBytes = kDropout ? kQueries * 2 * 4 : 0;
  static constexpr int kSharedBytes = 2 * KVTile::kBytes + 2 * kStages * QTile::kBytes + DsTile::kBytes +
                                      kExchangeBytes + kBoxSlots1 * DqBox::kBytes + 2 * kStages * kQueries * 4 +
                                      kBarrierBytes + kMaskBytes + 1024;
  static_assert(kSharedBytes <= 227 * 1024, "an H100/H200 block has at most 227 KiB of shared memory");
};

}  // namespace
}  // namespace flashbench::cuda
