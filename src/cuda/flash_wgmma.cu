// v2 on Hopper (sm_90a) for bf16/fp16: FlashAttention forward and backward with warpgroup matrix
// products (wgmma, hopper.cuh) reading 128-byte-swizzled shared-memory tiles, fp32 accumulators.
// Compiled for sm_90a alone (src/cuda/CMakeLists.txt); flash.cu calls it on a compute capability 9.0
// device and keeps the mma.sync kernels (flash_mma.cu) for every other GPU and as `v2.mma`.
//
// Forward: a block of warpgroups owns 64 queries each (3 at d = 64 without dropout, else 2) and walks
// the K/V tiles of kKeys keys (without dropout: 192 in 128-wide tiles, 112 at d = 192, 80 at d = 256;
// with it 64 past d = 128; else 128): S = Q·Kᵀ (both operands from shared memory), online softmax in
// registers, O += P·V with P straight from the S accumulators as the A operand. Past d = 64 without
// dropout a warpgroup runs the softmax of a tile while the tensor cores run the last tile's P·V.
//
// Backward (FlashAttention-2's loop order): a block of 2 warpgroups owns 128 keys (64 each) and walks
// the query tiles that see them (Q, dO, LSE, D; 64 queries, 128 at d = 64 and 80 at d = 128 without
// dropout):
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ                        (A and B from shared memory)
//   Pᵀ = exp(Sᵀ − LSE), dSᵀ = Pᵀ ∘ (dPᵀ − D)       (registers)
//   dV += Pᵀ·dO, dK += dSᵀ·Q                        (A from registers, B MN-major from shared memory)
//   dQ  = dS·K over the block's keys                (dSᵀ through shared memory, both MN-major; with
//                                                    80 queries dQᵀ = Kᵀ·dSᵀ, dS stored [queries][keys])
// Sᵀ and dPᵀ are two commit groups, so the exponentials start while dPᵀ is still on the tensor
// cores, and dSᵀ is stored for dQ before the dV and dK products are issued (the dK products hold it
// as their register A operand, which may not be read while they run). dQ goes to the fp32
// accumulator by the copy engine's reductions (cp.reduce.async.bulk.tensor, [queries][32] boxes from a
// swizzled tile) instead of per-element atomics; dK and dV once at the end. Past d = 128 that block
// does not fit an SM, and wide_backward_kernel splits the products between the warpgroups instead.
//
// Tiles arrive by the copy engine (TMA, one thread names a tile in a tensor map) on mbarriers, two
// stages deep; the last warp of the block to finish with a stage refills it. So the threads that
// compute issue no copies, and the warpgroups never wait for each other at a block barrier in the
// forward pass; in the backward, without dropout, each forms a tile's dQ during the next tile, from
// the other's half of dS handed over by named barriers, and at one per tile with dropout at D = 128.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "flash_common.cuh"
#include "flash_internal.hpp"
#include "flash_layer.cuh"
#include "hopper.cuh"
#include "tensor_map.hpp"

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

// Accumulator columns 16kk..16kk+15 (registers 8kk..8kk+7) as the A fragment of k-step kk.
template <class T, int kCount>
__device__ __forceinline__ void as_a_fragment(uint32_t (&a)[4], const float (&d)[kCount], int kk) {
  a[0] = pack2<T>(d[8 * kk + 0], d[8 * kk + 1]);
  a[1] = pack2<T>(d[8 * kk + 2], d[8 * kk + 3]);
  a[2] = pack2<T>(d[8 * kk + 4], d[8 * kk + 5]);
  a[3] = pack2<T>(d[8 * kk + 6], d[8 * kk + 7]);
}

// 2^x by the special-function unit alone (ex2.approx.ftz: relative error ~2⁻²², far below the
// 16-bit storage's 2⁻⁸..2⁻¹¹; tiny results flush to zero, as P's do after rounding anyway).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Dropout keep flags of kRows query rows × kKeys consecutive keys into keep [kRows][kLd] (1 = kept),
// drawn by the kThreads threads of a block, one Philox block (four consecutive elements of a row) per
// work item: a row whose first element is not 4-aligned spans kKeys/4 + 1 blocks. Row r's first
// element in the layer's [BH, N, N_k] weights is first_element + r·N_k.
template <int kRows, int kKeys, int kLd, int kThreads>
__device__ __forceinline__ void draw_keep_flags(const philox::DropoutMask& dropout, uint64_t first_element,
                                                int64_t seq_k, unsigned char* keep, int thread) {
  constexpr int kBlocksPerRow = kKeys / 4 + 1;
  for (int item = thread; item < kRows * kBlocksPerRow; item += kThreads) {
    const int row = item / kBlocksPerRow, block = item % kBlocksPerRow;
    const uint64_t first = first_element + uint64_t(row) * uint64_t(seq_k);
    const uint64_t block_start = (first / 4 + uint64_t(block)) * 4;
    if (block_start >= first + kKeys) continue;  // an aligned row needs kKeys/4 blocks, not one more
    const philox::Block words = dropout.block(block_start);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t key = int64_t(block_start + w) - int64_t(first);
      if (key >= 0 && key < kKeys) keep[row * kLd + key] = philox_word(words, w) >= dropout.threshold ? 1 : 0;
    }
  }
}

// Dropout keep flags of 64 query rows × 64 consecutive keys as bits: bit k % 32 of bits[2·row + k/32]
// is set where key k is kept. By 128 threads, one word each (its 32 keys span 8 or 9 Philox blocks
// of four consecutive elements), so no two threads write one word. Row r's first element in the
// layer's [BH, N, N_k] weights is first_element + r·N_k.
__device__ __forceinline__ void draw_keep_bits(const philox::DropoutMask& dropout, uint64_t first_element,
                                               int64_t seq_k, uint32_t* bits, int thread) {
  const int row = thread / 2, half = thread % 2;
  const uint64_t first = first_element + uint64_t(row) * uint64_t(seq_k) + 32 * half;
  uint32_t word = 0;
  for (uint64_t block_start = first / 4 * 4; block_start < first + 32; block_start += 4) {
    const philox::Block words = dropout.block(block_start);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t key = int64_t(block_start + w) - int64_t(first);
      if (key >= 0 && key < 32 && philox_word(words, w) >= dropout.threshold) word |= 1u << key;
    }
  }
  bits[thread] = word;
}

// Barrier of the 128 threads of one warpgroup (ids 1 and 2; 0 is __syncthreads): blocks of two
// warpgroups only.
__device__ __forceinline__ void warpgroup_barrier(int warpgroup) {
  if (warpgroup == 0)
    asm volatile("bar.sync 1, %0;\n" ::"n"(kWarpgroupThreads) : "memory");
  else
    asm volatile("bar.sync 2, %0;\n" ::"n"(kWarpgroupThreads) : "memory");
}

// Named barrier kId of kThreads threads: sync waits for all of them, arrive counts this thread in
// and goes on (a producer's hand-over: its stores before the arrive are seen after the consumers'
// sync). Warp-uniform, as bar.sync is.
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
// The same with the id chosen at run time (warp-uniform).
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}
template <int kThreads>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// A ring of kStages tile buffers that the copy engine fills: stage s completes on the mbarrier at
// full + 8s, and released + 4s counts the block's warps done with it. Tile i goes to stage
// i % kStages, and the warp that counts last refills the stage with tile i + kStages. The counts of
// consecutive uses never mix: a warp counts a stage's next use only after waiting for the tile that
// the last count of this use issued.
template <int kStages, int kWarps>
struct StageRing {
  uint32_t full;
  uint32_t released;
  int stage = 0;
  uint32_t phase = 0;  // of the current stage's mbarrier in its current use

  __device__ __forceinline__ uint32_t barrier(int s) const { return full + 8 * s; }
  // By one thread, before the block barrier that publishes them: each stage's mbarrier counting
  // `arrivals` a phase, its count of warps 0.
  __device__ __forceinline__ void init(unsigned char* shared_raw, uint32_t arrivals) const {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(barrier(s), arrivals);
      *reinterpret_cast<uint32_t*>(shared_raw + (released + 4 * s - shared_address(shared_raw))) = 0;
    }
  }
  // The current stage's tile is in shared memory.
  __device__ __forceinline__ void wait() const { mbarrier_wait(barrier(stage), phase); }
  // By lane 0 of a warp done with the current stage: true for the last of the block's kWarps.
  __device__ __forceinline__ bool count_done() const {
    return count_in(released + 4 * stage) % kWarps == kWarps - 1;
  }
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// The dynamic shared memory, from its first 1024-byte boundary (the swizzle pattern's period).
__device__ __forceinline__ uint32_t aligned_shared_base(const unsigned char* raw) {
  return (shared_address(raw) + 1023u) & ~1023u;
}
__device__ __forceinline__ unsigned char* generic_at(unsigned char* raw, uint32_t address) {
  return raw + (address - shared_address(raw));
}

// ---- forward ---------------------------------------------------------------------------------------

// o [64 rows × D] += a (k-step kk of the A operand, registers) · V's rows 16kk..16kk+15, all D
// columns, V MN-major from the descriptor of its column 0. One wgmma up to D = 128; beyond, the
// accumulator's column chunks of 128 (registers 64c..64c+63) and the rest each take their own
// product, reading V from the panel where the chunk's columns start.
template <class T, int D, class Tile>
__device__ __forceinline__ void add_product_by_column_chunks(float (&o)[D / 2], const uint32_t (&a)[4],
                                                             uint64_t v_desc, int kk) {
  if constexpr (D <= 128) {
    Wgmma<T, D>::template rs<1>(o, a, advance(v_desc, mn_major_step<Tile>(kk)), 1);
  } else {
    static_assert(D == 192 || D == 256, "head dims past 128: 192 or 256");
    Wgmma<T, 128>::template rs<1>(*reinterpret_cast<float(*)[64]>(&o[0]), a,
                                  advance(v_desc, mn_major_step<Tile>(kk)), 1);
    Wgmma<T, D - 128>::template rs<1>(*reinterpret_cast<float(*)[(D - 128) / 2]>(&o[64]), a,
                                      advance(v_desc, 2 * Tile::kPanelBytes + mn_major_step<Tile>(kk)), 1);
  }
}

// Warpgroups of 64 query rows a forward block: three where they fit, at d = 64 without dropout,
// where 168 registers a thread (384 threads on an SM's 64K) hold O and a 128-key S, and each K/V
// tile then serves 192 queries instead of 128; else two. Three at every N, causal or not: two had
// split the causal triangle more evenly below N = 2K while every warpgroup computed all of its
// block's tiles; since each computes only those its rows see (round w12), three took 0.89× the
// time of two at N = 512 and 0.94× at 1K, causal.
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
  // Each warpgroup's softmax of a tile under the tensor cores' product of the last one (the kernel's
  // comment), except at d = 64 (where it measured 0.98–1.06× the time of the loop in turn, round
  // w10) and with dropout (1.02–1.07×).
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

// grid (ceil(N/Plan::kQueries), BH), Plan::kThreads threads; Q, O: [BH, N, kDim]; K, V: [BG, N_k, kDim]
// (q_map, k_map, v_map: their tensor maps, boxes of Plan::kQueries and Plan::kKeys rows); lse: [BH, N] (natural log, +∞ for
// a row that sees no key). The tiles are D wide: a head dim kDim < D arrives zero-padded (d = 96 in 128), which
// changes no product (S's k-steps stop at kDim). kDropout: O = P̃·V with the mask of `dropout`.
//
// The warpgroups share K/V tiles but nothing else, so no block barrier orders them: tile j arrives
// on the mbarrier of stage j % kStages of a ring (issued by one thread, the copy engine moves it),
// and the last of the block's warps to finish with a stage issues the tile kStages further on into
// it. Each warpgroup's loop over the tiles takes one of two forms (Plan::kOverlapSoftmax):
//   in turn (d = 64, dropout): S_j = Q·K_jᵀ, wait, softmax, O = α_j·O + P_j·V_j, wait; one ring
//     holds K_j and V_j, released together;
//   overlapped (else): the softmax of tile j while the tensor cores run the product of tile j − 1,
//       issue S_j;  O ·= α_{j−1};  issue O += P_{j−1}·V_{j−1};
//       wait for S_j;  softmax of S_j (its max, α_j, P_j);  wait for O;  P_j to 16 bits,
//     so P_{j−1} (16-bit A fragments) and S_j live at once (kKeys/4 + kKeys/2 registers a thread).
//     K_j is done with a product before V_j, so K and V come in rings of their own (k_ring, v_ring),
//     each refilled as soon as its tile is free.
template <class T, int D, int kDim, bool kDropout>
__global__ void __launch_bounds__(ForwardPlan<D, kDropout>::kThreads, 1)
    forward_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                   const __grid_constant__ CUtensorMap v_map, T* __restrict__ O, float* __restrict__ lse,
                   Extents extents, float scale_log2, philox::DropoutMask dropout) {
  using Plan = ForwardPlan<D, kDropout>;
  using QTile = typename Plan::QTile;
  using KVTile = typename Plan::KVTile;
  using Ring = StageRing<Plan::kStages, Plan::kWarps>;
  static_assert(!kDropout || Plan::kWarpgroups == 2, "the keep flags' warpgroup_barrier has ids for two warpgroups");
  extern __shared__ unsigned char shared_raw[];
  const uint32_t sQ = aligned_shared_base(shared_raw);
  const uint32_t sK = sQ + QTile::kBytes;                 // [kStages] K tiles
  const uint32_t sV = sK + Plan::kStages * KVTile::kBytes;  // [kStages] V tiles
  const uint32_t q_full = sV + Plan::kStages * KVTile::kBytes;
  Ring k_ring{q_full + 8, q_full + 8 + 8 * Plan::kStages};  // K, or K and V in turn
  Ring v_ring{q_full + 8 + Plan::kRingBytes, q_full + 8 + Plan::kRingBytes + 8 * Plan::kStages};  // V, overlapped
  unsigned char* keep_tiles = generic_at(shared_raw, q_full + Plan::kBarrierBytes);  // kDropout: [wg][2][64][kMaskLd]

  // Causal query blocks further down see more keys: launch those first so short ones fill the tail.
  const int64_t seq = extents.seq, seq_k = extents.seq_k, shift = seq_k - seq;
  const bool causal = extents.causal;
  const int64_t head = blockIdx.y, q0 = int64_t(gridDim.x - 1 - blockIdx.x) * Plan::kQueries;
  const int64_t offset = head * seq * kDim, kv_head = head / extents.group_size;
  // The warpgroup through a shuffle from lane 0: the compiler then knows it is the same across the
  // warp, so what depends on it (this warpgroup's tile count, the loops' bounds and branches) stays
  // warp-uniform, in uniform registers, as the products' descriptors need.
  const int thread = threadIdx.x, warpgroup = __shfl_sync(0xffffffffu, thread / kWarpgroupThreads, 0);
  const int warp = (thread % kWarpgroupThreads) / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
  const int64_t first_row = q0 + warpgroup * Plan::kRowsPerWarpgroup;
  const int64_t row[2] = {first_row + warp * 16 + g, first_row + warp * 16 + g + 8};

  // The key tiles rows [first, first + rows) see: up to the last row's last key (the last row of the
  // problem for rows past N); none for rows all past N, or for rows above a bottom-right diagonal
  // that starts below them (their O stays 0).
  auto last_key_seen = [&](int64_t first, int64_t rows) {
    return first >= seq ? -1 : causal ? min(min(first + rows - 1, seq - 1) + shift, seq_k - 1) : seq_k - 1;
  };
  auto tiles_seen = [&](int64_t first, int64_t rows) {
    const int64_t last_key = last_key_seen(first, rows);
    return last_key < 0 ? 0 : int(last_key / Plan::kKeys) + 1;
  };
  // The block's tiles, and those of this warpgroup's rows: fewer where causal rows above the block's
  // last stop short of its last tile (the warpgroups of 192-query blocks at d = 64 had computed 1.11×
  // the tiles their rows see at N = 2K, 1.09× at 4K). The block's last rows see every tile, so each
  // tile still has a warpgroup that computes it.
  const int key_tiles = tiles_seen(q0, Plan::kQueries);
  const int own_tiles = tiles_seen(first_row, Plan::kRowsPerWarpgroup);
  // The warpgroup's last tile holds keys none of its rows see where it ends past N_k or past the
  // causal diagonal. In the overlapped loop its O += P·V then runs over the narrowest width, 64 or
  // 128 keys, that holds the keys its rows see: `last_width` (kKeys where nothing narrower does);
  // past it P is 0. (Narrowing the S products too, or the in-turn loop's, made ptxas serialize
  // the products (C7511) or spill at d = 96 and 128, and the d = 64 forward 1.06–1.14× slower.)
  const int keys_in_last_tile =
      own_tiles > 0 ? int(last_key_seen(first_row, Plan::kRowsPerWarpgroup) - int64_t(own_tiles - 1) * Plan::kKeys) + 1 : 0;
  const int last_width = keys_in_last_tile <= 64 && Plan::kKeys > 64     ? 64
                         : keys_in_last_tile <= 128 && Plan::kKeys > 128 ? 128
                                                                         : Plan::kKeys;

  // By one thread: V_j into stage `stage`, completing on mbarrier `full`.
  auto load_value_tile = [&](int j, int stage, uint32_t full) {
    tma_load_tile<KVTile>(sV + stage * KVTile::kBytes, v_map, int64_t(j) * Plan::kKeys, kv_head, full);
  };
  // By one thread: tile j into stage `stage` of k_ring (K_j, and V_j where one ring holds both), or
  // of v_ring (V_j).
  auto fetch_key_tile = [&](int j, int stage) {
    const uint32_t full = k_ring.barrier(stage);
    mbarrier_arrive_expect_bytes(full, (Plan::kOverlapSoftmax ? 1 : 2) * KVTile::kBytes);
    tma_load_tile<KVTile>(sK + stage * KVTile::kBytes, k_map, int64_t(j) * Plan::kKeys, kv_head, full);
    if constexpr (!Plan::kOverlapSoftmax) load_value_tile(j, stage, full);
  };
  auto fetch_value_tile = [&](int j, int stage) {
    const uint32_t full = v_ring.barrier(stage);
    mbarrier_arrive_expect_bytes(full, KVTile::kBytes);
    load_value_tile(j, stage, full);
  };
  // This warp is done with tile j of `ring` (its lane 0 counts it); the last of the block's warps
  // refills the stage with tile j + kStages, by fetch(tile, stage). Then the ring moves on.
  auto release = [&](Ring& ring, int j, const auto& fetch) {
    if (lane == 0 && ring.count_done() && j + Plan::kStages < key_tiles) fetch(j + Plan::kStages, ring.stage);
    ring.advance();
  };
  auto release_keys = [&](int j) { release(k_ring, j, fetch_key_tile); };  // K_j (and V_j in turn)
  auto release_values = [&](int j) { release(v_ring, j, fetch_value_tile); };
  if (thread == 0) {
    mbarrier_init(q_full, 1);
    k_ring.init(shared_raw, 1);
    if constexpr (Plan::kOverlapSoftmax) v_ring.init(shared_raw, 1);
    fence_mbarrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them or the copy engine completes on them
  if (thread == 0 && key_tiles > 0) {
    mbarrier_arrive_expect_bytes(q_full, QTile::kBytes);
    tma_load_tile<QTile>(sQ, q_map, q0, head, q_full);
    for (int j = 0; j < Plan::kStages && j < key_tiles; ++j) {
      fetch_key_tile(j, j);
      if constexpr (Plan::kOverlapSoftmax) fetch_value_tile(j, j);
    }
  }

  // Dropout: this warpgroup's keep flags of key tile `j` for its 64 queries, into flag buffer j % 2,
  // drawn by its 128 threads; a warpgroup barrier at the top of each tile orders the draws before
  // the reads and the last tile's reads before the next draws.
  constexpr int kRows = Plan::kRowsPerWarpgroup;
  unsigned char* keep_here = keep_tiles + warpgroup * 2 * kRows * Plan::kMaskLd;
  auto draw_tile_flags = [&](int j) {
    draw_keep_flags<kRows, Plan::kKeys, Plan::kMaskLd, kWarpgroupThreads>(
        dropout, uint64_t((head * seq + q0 + warpgroup * kRows) * seq_k + int64_t(j) * Plan::kKeys), seq_k,
        keep_here + (j & 1) * kRows * Plan::kMaskLd, thread % kWarpgroupThreads);
  };
  if constexpr (kDropout) {
    if (own_tiles > 0) draw_tile_flags(0);
  }
  if (own_tiles > 0) mbarrier_wait(q_full, 0);

  // S_j = Q·K_jᵀ [64 rows × kKeys keys] over the k-steps of the head dim that hold data, issued as
  // one commit group.
  auto issue_scores = [&](float (&s)[Plan::kKeys / 2]) {
    const uint64_t q_desc = opaque(k_major_base<QTile>(sQ, warpgroup * 64));
    const uint64_t k_desc = k_major_base<KVTile>(sK + k_ring.stage * KVTile::kBytes, 0);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDepthSteps<kDim>; ++kk)
      Wgmma<T, Plan::kKeys>::template ss<0, 0>(s, advance(q_desc, k_major_step<QTile>(kk)),
                                                advance(k_desc, k_major_step<KVTile>(kk)), kk > 0);
    wgmma_commit();
  };
  // The product's width as a compile-time constant (std::integral_constant; chosen at run time
  // inside the product, the branches made ptxas serialize the products): with_width(width, f)
  // calls f with 64, 128 or kKeys as such a constant.
  using FullWidth = std::integral_constant<int, Plan::kKeys>;
  auto with_width = [&](int width, const auto& f) {
    if (Plan::kKeys > 64 && width == 64)
      f(std::integral_constant<int, 64>{});
    else if (Plan::kKeys > 128 && width == 128)
      f(std::integral_constant<int, (Plan::kKeys > 128 ? 128 : 64)>{});
    else
      f(FullWidth{});
  };
  // O += P·V over the width's keys, P from registers (16-bit A fragments), V [keys × D] read
  // MN-major, one commit group.
  // V's descriptor: of the current stage of v_ring, or of k_ring where one ring holds K and V.
  auto values_desc = [&] {
    return mn_major_base<KVTile>(sV + (Plan::kOverlapSoftmax ? v_ring.stage : k_ring.stage) * KVTile::kBytes, 0);
  };
  auto issue_values = [&](float (&o)[D / 2], const uint32_t (&p)[Plan::kKeys / 16][4], uint64_t v_desc, auto width) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < decltype(width)::value / 16; ++kk) add_product_by_column_chunks<T, D, KVTile>(o, p[kk], v_desc, kk);
    wgmma_commit();
  };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max [log2 units], partial sums
  // The online softmax of tile j's scores s: masked scores (past N_k, or right of the diagonal) to 0,
  // the others to exp2(s·scale_log2 − m) with m the running max, l updated; sets alpha to α, the
  // factor that takes O from the old max to the new one. The test is skipped on interior tiles, where
  // every key exists and every row of the warpgroup sees every key. The scores stay unscaled: the
  // scale (> 0) goes into the maximum once and into each exponent's FMA.
  auto softmax_tile = [&](float (&s)[Plan::kKeys / 2], int j, float (&alpha)[2]) {
    const int64_t k0 = int64_t(j) * Plan::kKeys;
    const bool interior = k0 + Plan::kKeys <= seq_k && (!causal || k0 + Plan::kKeys - 1 <= first_row + shift);
    float tile_max[2] = {-INFINITY, -INFINITY};
    if (!interior) {
      const int keys_left = int(min(seq_k - k0, int64_t(Plan::kKeys)));
      // The last visible local key of each row (causal), clamped into int range.
      const int diagonal[2] = {int(max(min(row[0] + shift - k0, int64_t(Plan::kKeys)), int64_t(-1))),
                               int(max(min(row[1] + shift - k0, int64_t(Plan::kKeys)), int64_t(-1)))};
#pragma unroll
      for (int c = 0; c < Plan::kKeys / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int local_key = 8 * c + 2 * t + (e & 1);
          const bool visible = local_key < keys_left && (!causal || local_key <= diagonal[e / 2]);
          if (!visible) s[4 * c + e] = -INFINITY;
        }
    }
#pragma unroll
    for (int c = 0; c < Plan::kKeys / 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[4 * c + e]);
    float shift_by[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float new_max = fmaxf(m[h], tile_max[h] * scale_log2);  // log2 units
      shift_by[h] = new_max == -INFINITY ? 0.0f : new_max;  // a row with nothing visible yet stays at 0
      alpha[h] = exp2f(m[h] - shift_by[h]);
      m[h] = new_max;
    }
    float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int c = 0; c < Plan::kKeys / 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[4 * c + e] = fast_exp2(fmaf(s[4 * c + e], scale_log2, -shift_by[e / 2]));
        tile_sum[e / 2] += s[4 * c + e];
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + tile_sum[h];
    // Dropout after the normaliser: l sums the undropped weights, O the dropped ones. P keeps its
    // value or becomes 0 here (P·Z, packed to 16 bits as it is); 1/(1 − p) is applied once, in the
    // epilogue, where it does not round P a second time.
    if constexpr (kDropout) {
      const unsigned char* keep = keep_here + (j & 1) * kRows * Plan::kMaskLd;
      const int local_row[2] = {warp * 16 + g, warp * 16 + g + 8};
#pragma unroll
      for (int c = 0; c < Plan::kKeys / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!keep[local_row[e / 2] * Plan::kMaskLd + 8 * c + 2 * t + (e & 1)]) s[4 * c + e] = 0.0f;
    }
  };
  float o[D / 2];  // O [64 rows × D] of this warpgroup
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float s[Plan::kKeys / 2];          // S_j, then its P_j in fp32
  uint32_t p[Plan::kKeys / 16][4];   // P in 16 bits, the A operand of O's product
  float alpha[2];                    // α of the last softmax
  auto rescale_output = [&] {
#pragma unroll
    for (int c = 0; c < D / 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * c + e] *= alpha[e / 2];
  };
  // P to 16 bits, pinned there: the packing reads S, which the next S product overwrites, so it
  // stays before that product's fence (the overlapped loop issues the product next).
  auto pack_probabilities = [&] {
#pragma unroll
    for (int kk = 0; kk < Plan::kKeys / 16; ++kk) as_a_fragment<T>(p[kk], s, kk);
#pragma unroll
    for (int kk = 0; kk < Plan::kKeys / 16; ++kk) pin(p[kk]);
  };
  // Ties O and P to this point: their writes (O's scaling, P's packing) stay before the fence of the
  // product that reads them, and after a wait, the end of that product's reads stays before them.
  auto pin_operands = [&] {
#pragma unroll
    for (int kk = 0; kk < Plan::kKeys / 16; ++kk) pin(p[kk]);
    pin(o);
  };
  if constexpr (Plan::kOverlapSoftmax) {
    if (own_tiles > 0) {
      k_ring.wait();
      issue_scores(s);
      wgmma_wait<0>();
      pin(s);
      release_keys(0);
      softmax_tile(s, 0, alpha);  // O is 0: α_0 is not needed
      pack_probabilities();
    }
    for (int j = 1; j < own_tiles; ++j) {
      k_ring.wait();  // K_j is in shared memory
      issue_scores(s);
      // By α_{j−1}. Not at j = 1, where O is 0: scaling its zeros by α_0 = 0 too (no branch) made
      // ptxas serialize the d = 96 kernel's products for want of registers.
      if (j > 1) rescale_output();
      pin_operands();
      v_ring.wait();  // V_{j−1}, not the last tile
      issue_values(o, p, values_desc(), FullWidth{});
      wgmma_wait<1>();
      pin(s);
      release_keys(j);
      softmax_tile(s, j, alpha);
      wgmma_wait<0>();
      pin_operands();  // P_{j−1} is read until here
      release_values(j - 1);
      pack_probabilities();
    }
    if (own_tiles > 0) {
      if (own_tiles > 1) rescale_output();
      pin_operands();
      v_ring.wait();
      with_width(last_width, [&](auto width) { issue_values(o, p, values_desc(), width); });
      wgmma_wait<0>();
      pin(o);
      release_values(own_tiles - 1);
    }
  } else {
    for (int j = 0; j < own_tiles; ++j) {
      k_ring.wait();  // K_j and V_j are in shared memory
      if constexpr (kDropout) warpgroup_barrier(warpgroup);
      const uint64_t v_desc = values_desc();
      issue_scores(s);
      if constexpr (kDropout) {
        if (j + 1 < own_tiles) draw_tile_flags(j + 1);  // while S is on the tensor cores
      }
      wgmma_wait<0>();
      pin(s);
      softmax_tile(s, j, alpha);
      rescale_output();  // α_0 = 0 multiplies the zeros of O
      pack_probabilities();
      pin_operands();
      issue_values(o, p, v_desc, FullWidth{});
      wgmma_wait<0>();
      pin(o);
      release_keys(j);  // K_j and V_j
    }
  }
  // The block's tiles past this warpgroup's rows: each counted done once it is in shared memory, as
  // the ring needs (a stage is refilled when all the block's warps have passed it, and waiting for
  // tile j first keeps this warp's count of it from joining that of tile j − kStages).
  for (int j = own_tiles; j < key_tiles; ++j) {
    k_ring.wait();
    release_keys(j);
    if constexpr (Plan::kOverlapSoftmax) {
      v_ring.wait();
      release_values(j);
    }
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (row[h] >= seq) continue;
    // 1/l, and with dropout 1/(1 − p) too; a row that sees no key: O = 0.
    const float inverse = l[h] > 0.0f ? (kDropout ? dropout.scale : 1.0f) / l[h] : 0.0f;
    T* out = O + offset + row[h] * kDim;
#pragma unroll
    for (int c = 0; c < kDim / 8; ++c)
      *reinterpret_cast<uint32_t*>(out + 8 * c + 2 * t) =
          pack2<T>(o[4 * c + 2 * h] * inverse, o[4 * c + 2 * h + 1] * inverse);
    if (t == 0) lse[head * seq + row[h]] = l[h] > 0.0f ? (m[h] + log2f(l[h])) * kLn2 : INFINITY;
  }
}

// ---- backward: the query tiles a block walks -------------------------------------------------------

// A query tile of the backward: rows q0.. of query head `head`.
struct QueryTile {
  int64_t head;        // the query head
  int64_t row_offset;  // head · N: its first row in Q, dO, LSE, D and dQ
  int64_t q0;          // the tile's first query
};

// The query tiles a backward block of keys k0.. walks: first_query, first_query + kQueries, … of each
// of the group's query heads it takes, in turn (causal: queries i < k0 − shift see none of its keys).
// It takes all r heads of the group, or a share of them where the grid splits the group over
// gridDim.z blocks (too few K/V heads and key blocks to fill the GPU: MQA, GQA at short N); dK and dV
// are added atomically at the end, so the shares sum. A cursor steps through the tiles (no division
// per tile: the loops are instruction-bound).
template <int kQueries>
struct QueryWalk {
  int64_t seq;
  int64_t first_query;
  int count;        // the block's query tiles
  QueryTile first;  // its first

  __device__ __forceinline__ static QueryWalk of(const Extents& extents, int64_t k0, int64_t kv_head) {
    const int64_t seq = extents.seq, shift = extents.seq_k - extents.seq;
    const int64_t first_query = extents.causal ? max(k0 - shift, int64_t(0)) : 0;
    const int tiles_per_head = first_query < seq ? int((seq - first_query + kQueries - 1) / kQueries) : 0;
    const int heads_per_split = (extents.group_size + int(gridDim.z) - 1) / int(gridDim.z);
    const int first_head = int(blockIdx.z) * heads_per_split;
    const int heads_here = max(0, min(extents.group_size - first_head, heads_per_split));
    const int64_t head = kv_head * extents.group_size + first_head;
    return {seq, first_query, tiles_per_head * heads_here, QueryTile{head, head * seq, first_query}};
  }
  __device__ __forceinline__ QueryTile next(QueryTile tile) const {
    tile.q0 += kQueries;
    if (tile.q0 >= seq) {
      tile.q0 = first_query;
      tile.head += 1;
      tile.row_offset += seq;
    }
    return tile;
  }
};

// By one whole warp: query tile `tile` into stage `stage` of the ring, Q and dO through the copy
// engine (lane 0) into the QTiles at sQ and sdO ([stages] of them), LSE and D by cp.async (rows
// lane, lane + 32, … below kQueries; zeros past N) into the fp32 rows at sLse and sRowDot
// ([stages][kQueries]), all completing on `barrier` (1 + 32 arrivals a phase).
template <class QTile>
__device__ __forceinline__ void fetch_query_tile(const CUtensorMap& q_map, const CUtensorMap& do_map,
                                                 const float* lse, const float* row_dot, int64_t seq,
                                                 const QueryTile& tile, int stage, uint32_t barrier, uint32_t sQ,
                                                 uint32_t sdO, uint32_t sLse, uint32_t sRowDot, int lane) {
  constexpr int kQueries = QTile::kPanelBytes / 128;  // the tile's rows
  static_assert(kQueries % 16 == 0, "LSE and D rows in whole halves of a warp");
  if (lane == 0) {
    mbarrier_arrive_expect_bytes(barrier, 2 * QTile::kBytes);
    tma_load_tile<QTile>(sQ + stage * QTile::kBytes, q_map, tile.q0, tile.head, barrier);
    tma_load_tile<QTile>(sdO + stage * QTile::kBytes, do_map, tile.q0, tile.head, barrier);
  }
#pragma unroll
  for (int half = 0; half < (kQueries + 31) / 32; ++half) {
    const int r = lane + 32 * half;
    if (kQueries % 32 != 0 && r >= kQueries) break;
    const bool inside = tile.q0 + r < seq;
    const int64_t index = tile.row_offset + (inside ? tile.q0 + r : 0);
    cp_async_4(sLse + (stage * kQueries + r) * 4, lse + index, inside);
    cp_async_4(sRowDot + (stage * kQueries + r) * 4, row_dot + index, inside);
  }
  cp_async_arrive(barrier);
}

// Pᵀ = exp(Sᵀ − LSE) in place over a warpgroup's Sᵀ accumulator [64 keys × 64 queries] (the forward
// pass's P_ij = exp(S_ij − LSE_i), transposed), 0 where masked. In 32-bit tile coordinates: query
// q0 + lq exists when lq < queries_left, and sees key k0 + lk when lk <= lq + diagonal. Interior
// tiles (every query and key exists, every key is seen by every query) skip the test. The block has
// kKeys keys from k0; register 4c + e holds key key_local[e/2] of the block (key_inside: it exists)
// and query 8c + 2t + e%2 of the tile; lse_row: the tile's LSE (natural log).
template <int kKeys, int kQueries>
__device__ __forceinline__ void probabilities_transposed(float (&st)[32], const float* lse_row, float scale_log2,
                                                         const Extents& extents, int64_t q0, int64_t k0,
                                                         const int (&key_local)[2], const bool (&key_inside)[2],
                                                         int t) {
  const int64_t seq = extents.seq, seq_k = extents.seq_k, shift = seq_k - seq;
  const bool causal = extents.causal;
  const int queries_left = int(min(seq - q0, int64_t(kQueries)));
  const int diagonal = int(max(min(q0 + shift - k0, int64_t(kKeys)), int64_t(-kQueries - 1)));
  const bool interior = queries_left == kQueries && k0 + kKeys <= seq_k && (!causal || diagonal >= kKeys - 1);
  if (interior) {
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        st[4 * c + e] = fast_exp2(fmaf(st[4 * c + e], scale_log2, -kLog2e * lse_row[8 * c + 2 * t + (e & 1)]));
  } else {
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local_query = 8 * c + 2 * t + (e & 1);
        const bool visible = local_query < queries_left && key_inside[e / 2] &&
                             (!causal || key_local[e / 2] <= local_query + diagonal);
        st[4 * c + e] =
            visible ? fast_exp2(fmaf(st[4 * c + e], scale_log2, -kLog2e * lse_row[8 * c + 2 * t + (e & 1)])) : 0.0f;
      }
  }
}

// dSᵀ from A fragments (as_a_fragment of the accumulator [64 keys × 64 queries]) into the DsTile at
// ds_tile: accumulator register pair (c, h) is (key_local[h], queries 8c + 2t, +1), and fragment
// kk = c/2 holds it in a[2·(c%2) + h].
template <class DsTile>
__device__ __forceinline__ void store_transposed(unsigned char* ds_tile, const uint32_t (&dsa)[4][4],
                                                 const int (&key_local)[2], int t) {
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<uint32_t*>(ds_tile + DsTile::offset(key_local[h], 8 * c + 2 * t)) = dsa[c / 2][2 * (c % 2) + h];
}

// ---- backward --------------------------------------------------------------------------------------

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
  // at a fixed point of each tile: a block barrier a tile (round w11's ncu) kept the two in lock-step,
  // their softmax phases together, with the tensor cores idle under both. The registers are as
  // before: dQ's accumulators (40 transposed, 32 at d = 64) are live beside dK, dV and the A
  // fragments, as in the undeferred order, not beside S and dP. The hand-overs, by named barriers of
  // both warpgroups (ids 1 and 2 are each warpgroup's own), warpgroup w arriving, the other waiting,
  // b the dS buffer:
  //   kDsStoredBarrier + 2w + b: w's half of the dS in buffer b is stored (before the other's dQ);
  //   kDsReadBarrier + 2w + b:   w's dQ products have read buffer b (before the other stores in it).
  // One id per buffer: an id is reused two tiles on, after its waiter has passed its last use.
  static constexpr bool kDqDeferred = !kDropout && (kQueries == 80 || kQueries == 128);
  static constexpr int kDsStoredBarrier = 3;
  static constexpr int kDsReadBarrier = 7;
  static_assert(kDsStoredBarrier > 2 && kDsReadBarrier >= kDsStoredBarrier + 4 && kDsReadBarrier + 4 <= 16,
                "named barriers: 16 a block, 0 the block's, 1 and 2 the warpgroups' own");
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
  // partials' reductions made the L2 the busiest unit (ncu, round w9: 74 % of its crossbar).
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

// grid (ceil(N_k/128) key blocks, BG), 256 threads: a block walks the query tiles of the r query
// heads that read its K/V head, so dK and dV sum over the group in registers. q_map, do_map: the
// tensor maps of Q, dO [BH, N, kDim] (boxes of kQueries rows); k_map, v_map of K, V [BG, N_k, kDim]
// (128). Adds dQ into the accumulator [BH, N, kDim] of dq_map (fp32 boxes of Plan::kDqBoxRows rows),
// dK into dk_accumulator and dV into dv_accumulator [BG, N_k, kDim] (fp32, three distinct buffers
// zeroed by the caller); lse (natural log) and row_dot [BH, N]. Tiles D wide, the head dim kDim ≤ D
// zero-padded as in the forward kernel. kDropout: the mask of `dropout` redrawn per tile, P̃ for dV
// and dP = dP̃ ∘ Z/(1 − p) for dS.
//
// Query tile `it` arrives on mbarrier full[it % kStages]: Q and dO by the copy engine, LSE and D
// by cp.async of the warp that issued it; the last of the block's 8 warps to finish with a stage
// refills it. Each warpgroup's dQ products need both halves of dSᵀ (its columns at D = 128, its query
// half at d = 64) but at d = 64 with dropout, where each reduces a partial dQ over its own keys.
// Without dropout they take them a tile late, by named barriers (Plan::kDqDeferred); with dropout at
// D = 128 the warpgroups meet at a block barrier each tile.
template <class T, int D, int kDim, bool kDropout>
__global__ void __launch_bounds__(256, 1)
    backward_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                    const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap do_map,
                    const __grid_constant__ CUtensorMap dq_map, const float* __restrict__ lse,
                    const float* __restrict__ row_dot, float* dk_accumulator, float* dv_accumulator,
                    Extents extents, float scale, float scale_log2,
                    philox::DropoutMask dropout) {
  using Plan = BackwardPlan<D, kDropout>;
  using KVTile = typename Plan::KVTile;
  using QTile = typename Plan::QTile;
  using DsTile = typename Plan::DsTile;
  using DqTile = typename Plan::DqTile;
  extern __shared__ unsigned char shared_raw[];
  const uint32_t sK = aligned_shared_base(shared_raw);
  const uint32_t sV = sK + Plan::kKBytes;
  const uint32_t sQ = sV + Plan::kKBytes;                  // [kStages]
  const uint32_t sdO = sQ + Plan::kStages * Plan::kQBytes;  // [kStages]
  const uint32_t sdS = sdO + Plan::kStages * Plan::kQBytes; // [kDsBuffers]
  const uint32_t sDq = sdS + Plan::kDsBuffers * DsTile::kBytes;
  const uint32_t sLse = sDq + Plan::kDqBytes;               // [kStages][kQueries] fp32
  const uint32_t sRowDot = sLse + Plan::kStages * Plan::kQueries * 4;
  const uint32_t kv_full = sRowDot + Plan::kStages * Plan::kQueries * 4;
  StageRing<Plan::kStages, Plan::kWarps> ring{kv_full + 8, kv_full + 8 + 8 * Plan::kStages};  // Q, dO, LSE, D
  float* lse_tile = reinterpret_cast<float*>(generic_at(shared_raw, sLse));
  float* row_dot_tile = reinterpret_cast<float*>(generic_at(shared_raw, sRowDot));
  unsigned char* keep_tiles = generic_at(shared_raw, kv_full + Plan::kBarrierBytes);  // kDropout: [2 wg][2][64][kMaskLd]

  const int64_t seq = extents.seq, seq_k = extents.seq_k, shift = seq_k - seq;
  const bool causal = extents.causal;
  const int64_t kv_head = blockIdx.y, k0 = int64_t(blockIdx.x) * Plan::kKeys;
  const int thread = threadIdx.x, warpgroup = thread / kWarpgroupThreads;
  const int warp = (thread % kWarpgroupThreads) / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
  const int key_local[2] = {warpgroup * 64 + warp * 16 + g, warpgroup * 64 + warp * 16 + g + 8};
  const bool key_inside[2] = {k0 + key_local[0] < seq_k, k0 + key_local[1] < seq_k};

  // The query tiles this block walks (QueryWalk: causal rows that see none of its keys skipped, the
  // group's query heads or this block's share of them).
  const QueryWalk<Plan::kQueries> walk = QueryWalk<Plan::kQueries>::of(extents, k0, kv_head);
  const int query_tiles = walk.count;
  auto next_tile = [&](const QueryTile& tile) { return walk.next(tile); };
  auto fetch = [&](const QueryTile& tile, int stage) {  // by one whole warp
    fetch_query_tile<QTile>(q_map, do_map, lse, row_dot, seq, tile, stage, ring.barrier(stage), sQ, sdO, sLse,
                            sRowDot, lane);
  };
  // Dropout: the keep flags of a tile's 64 queries × this warpgroup's 64 keys, drawn by its 128
  // threads into flag buffer `buffer`, for the next tile while this one's products run; the
  // warpgroup's (or the block's) barrier before dQ orders the draws before the next tile's reads,
  // and this tile's reads (before that barrier) before the draws after it.
  unsigned char* keep_here = keep_tiles + warpgroup * 2 * Plan::kQueries * Plan::kMaskLd;
  auto draw_tile_flags = [&](const QueryTile& tile, int buffer) {
    draw_keep_flags<Plan::kQueries, Plan::kKeys / 2, Plan::kMaskLd, kWarpgroupThreads>(
        dropout, uint64_t((tile.row_offset + tile.q0) * seq_k + k0 + warpgroup * 64), seq_k,
        keep_here + buffer * Plan::kQueries * Plan::kMaskLd, thread % kWarpgroupThreads);
  };

  if (thread == 0) {
    mbarrier_init(kv_full, 1);
    ring.init(shared_raw, 1 + 32);
    fence_mbarrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them or the copy engine completes on them
  QueryTile tile = walk.first;
  const bool first_warp = thread < 32;
  if (first_warp && lane == 0 && query_tiles > 0) {
    mbarrier_arrive_expect_bytes(kv_full, 2 * Plan::kKBytes);
    tma_load_tile<KVTile>(sK, k_map, k0, kv_head, kv_full);
    tma_load_tile<KVTile>(sV, v_map, k0, kv_head, kv_full);
  }
  QueryTile refill = tile;  // the tile kStages after `tile`: what the stage refilled next receives
  for (int stage = 0; stage < Plan::kStages; ++stage, refill = next_tile(refill))
    if (first_warp && stage < query_tiles) fetch(refill, stage);
  if constexpr (kDropout) {
    if (query_tiles > 0) draw_tile_flags(tile, 0);
    warpgroup_barrier(warpgroup);  // the first tile's flags are drawn before its reads
  }
  if (query_tiles > 0) mbarrier_wait(kv_full, 0);

  // The thread of each warpgroup that hands its part of dQ to the copy engine.
  const bool reducer = thread % kWarpgroupThreads == 0;
  float dk[D / 2], dv[D / 2];  // this warpgroup's 64 keys × D
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;
  // dQ of a tile, its dS in the buffer at sdS_dq: the products issued and committed, not waited for.
  // Transposed (80 queries): dQᵀ = Kᵀ·dSᵀ for this warpgroup's 64 columns of D over
  // all 128 keys, A = K read M-major, B = dS [queries][keys] read K-major. Otherwise dQ = dS·K for
  // 64 queries (query_row0.. of the tile: dSᵀ's panel query_row0/64): A = dSᵀ [keys][queries] read
  // M-major, B = K [keys][D] read N-major, the split of kDqParts above: over all 128 keys, or over
  // this warpgroup's own 64 (k-steps 4w..4w+3).
  constexpr int kDqSteps = Plan::kDqParts == 1 ? Plan::kKeys / 16 : 4;
  const int first_step = Plan::kDqParts == 1 ? 0 : 4 * warpgroup;
  const int query_row0 = Plan::kDqByQueryHalves ? 64 * warpgroup : 0;
  constexpr int kDqAccumulators = Plan::kDqTransposed ? Plan::kQueries / 2 : 32;
  auto issue_dq = [&](float (&dq)[kDqAccumulators], uint32_t sdS_dq) {
    if constexpr (Plan::kDqTransposed) {
      wgmma_fence();
      const uint64_t k_t_desc = opaque(mn_major_base<KVTile>(sK, warpgroup * 64));
      const uint64_t ds_desc = opaque(k_major_base<DsTile>(sdS_dq, 0));
#pragma unroll
      for (int kk = 0; kk < kDqSteps; ++kk)
        Wgmma<T, Plan::kQueries>::template ss<1, 0>(dq, advance(k_t_desc, mn_major_step<KVTile>(kk)),
                                                     advance(ds_desc, k_major_step<DsTile>(kk)), kk > 0);
    } else {
      const uint64_t ds_desc = advance(opaque(mn_major_base<DsTile>(sdS_dq, 0)),
                                       (query_row0 / 64) * DsTile::kPanelBytes + mn_major_step<DsTile>(first_step));
      const uint64_t k_t_desc =
          advance(opaque(mn_major_base<KVTile>(sK, D == 128 ? warpgroup * 64 : 0)), mn_major_step<KVTile>(first_step));
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kDqSteps; ++kk)
        Wgmma<T, 64>::template ss<1, 1>(dq, advance(ds_desc, mn_major_step<DsTile>(kk)),
                                        advance(k_t_desc, mn_major_step<KVTile>(kk)), kk > 0);
    }
    wgmma_commit();
  };
  // Each warpgroup writes its part of dQ (its 64 columns, its 64 queries, or its own partial tile)
  // and one of its threads hands it to the copy engine, which adds it into the accumulator a
  // [kDqBoxRows rows][32 columns] box at a time (rows past N and columns past kDim are dropped): no
  // block-wide barrier needed.
  auto reduce_dq = [&](const float (&dq)[kDqAccumulators], const QueryTile& query_tile) {
    const int part = Plan::kDqParts == 2 ? warpgroup : 0, column0 = D == 128 ? warpgroup * 64 : 0;
    const uint32_t dq_part = sDq + part * DqTile::kBytes;
    if constexpr (Plan::kDqTransposed) {
      // Accumulator register 4c + 2h + e is dQ's column column0 + 16·warp + g + 8h of query
      // 8c + 2t + e: 4-byte stores, a warp's 32 of one register in 8 distinct 16-byte chunks of the
      // swizzled tile (conflict-free). Query 8c + 2t + e is 1024·c bytes past query 2t + e, the
      // swizzle unchanged: four addresses (h, e), formed here rather than held across the loop.
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          unsigned char* row_base =
              generic_at(shared_raw, opaque(uint32_t(dq_part + DqTile::offset(2 * t + e, column0 + warp * 16 + g + 8 * h))));
#pragma unroll
          for (int c = 0; c < Plan::kQueries / 8; ++c)
            *reinterpret_cast<float*>(row_base + 1024 * c) = scale * dq[4 * c + 2 * h + e];
        }
    } else if constexpr (!kDropout) {
      unsigned char* dq_tile = generic_at(shared_raw, dq_part);
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(dq_tile + DqTile::offset(query_row0 + warp * 16 + g + 8 * h, column0 + 8 * c + 2 * t)) =
              make_float2(scale * dq[4 * c + 2 * h], scale * dq[4 * c + 2 * h + 1]);
    } else {
      // The same addresses, formed in the loop where registers are short (dropout's Philox draws):
      // DqTile::offset of (row 16·warp + g + 8h, column column0 + 8c + 2t) is row_base + 1024h +
      // panel (column0 + 8c)/32 + 16-byte chunk (2(c % 4) + t/2) ^ g, that is 2(c % 4) ^ chunk. Both
      // lane parts are hidden from loop-invariant motion, so the addresses are formed here instead of
      // being held across the loop (108 bytes of spill otherwise). Without dropout, the form above
      // measured 2-3 % faster.
      unsigned char* row_base =
          generic_at(shared_raw, opaque(uint32_t(dq_part + (warp * 16 + g) * 128 + (t & 1) * 8)));
      const uint32_t chunk = opaque(uint32_t((t >> 1) ^ g));
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(row_base + 1024 * h + ((column0 + 8 * c) / 32) * DqTile::kPanelBytes +
                                     ((chunk ^ uint32_t(2 * (c % 4))) << 4)) =
              make_float2(scale * dq[4 * c + 2 * h], scale * dq[4 * c + 2 * h + 1]);
    }
    fence_proxy_async();
    warpgroup_barrier(warpgroup);
    if (reducer) {
#pragma unroll
      for (int box = 0; box < 2; ++box) {
        const int column = column0 + 32 * box;
        if (column < kDim)
          tma_reduce_add_3d(dq_map, dq_part + (column / 32) * DqTile::kPanelBytes + query_row0 * 128, column,
                            int(query_tile.q0) + query_row0, int(query_tile.head));
      }
      bulk_commit();
    }
  };
  [[maybe_unused]] const int other = warpgroup ^ 1;
  [[maybe_unused]] QueryTile deferred_tile = tile;  // kDqDeferred: the tile whose dQ is formed next
  for (int it = 0; it < query_tiles; ++it, tile = next_tile(tile), refill = next_tile(refill)) {
    const int buffer = it & 1;  // of dSᵀ and the dropout flags
    const int64_t q0 = tile.q0;
    const int stage = ring.stage;
    ring.wait();  // tile it is in shared memory
    const uint32_t sQi = sQ + stage * Plan::kQBytes, sdOi = sdO + stage * Plan::kQBytes;
    const float* lse_i = lse_tile + stage * Plan::kQueries;
    const float* row_dot_i = row_dot_tile + stage * Plan::kQueries;

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for this warpgroup's 64 keys × kQueries queries, as two groups: the
    // exponentials of Pᵀ run while dPᵀ is still on the tensor cores.
    const uint64_t k_desc = opaque(k_major_base<KVTile>(sK, warpgroup * 64));
    const uint64_t v_desc = opaque(k_major_base<KVTile>(sV, warpgroup * 64));
    const uint64_t q_desc = k_major_base<QTile>(sQi, 0), do_desc = k_major_base<QTile>(sdOi, 0);
    float st[Plan::kQueries / 2], dpt[Plan::kQueries / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDepthSteps<kDim>; ++kk)
      Wgmma<T, Plan::kQueries>::template ss<0, 0>(st, advance(k_desc, k_major_step<KVTile>(kk)),
                                                  advance(q_desc, k_major_step<QTile>(kk)), kk > 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kDepthSteps<kDim>; ++kk)
      Wgmma<T, Plan::kQueries>::template ss<0, 0>(dpt, advance(v_desc, k_major_step<KVTile>(kk)),
                                                  advance(do_desc, k_major_step<QTile>(kk)), kk > 0);
    wgmma_commit();
    if constexpr (kDropout) {
      if (it + 1 < query_tiles) draw_tile_flags(next_tile(tile), buffer ^ 1);
    }
    wgmma_wait<1>();
    pin(st);

    // In the forward pass P_ij = exp(S_ij − LSE_i): here Pᵀ, 0 where masked.
    // In 32-bit tile coordinates: query q0 + lq exists when lq < queries_left, and sees key
    // k0 + lk when lk <= lq + diagonal. Interior tiles (every query and key exists, every key is
    // seen by every query) skip the test.
    const int queries_left = int(min(seq - q0, int64_t(Plan::kQueries)));
    const int diagonal = int(max(min(q0 + shift - k0, int64_t(Plan::kKeys)), int64_t(-Plan::kQueries - 1)));
    const bool interior =
        queries_left == Plan::kQueries && k0 + Plan::kKeys <= seq_k && (!causal || diagonal >= Plan::kKeys - 1);
    if (interior) {
#pragma unroll
      for (int c = 0; c < Plan::kQueries / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          st[4 * c + e] = fast_exp2(fmaf(st[4 * c + e], scale_log2, -kLog2e * lse_i[8 * c + 2 * t + (e & 1)]));
    } else {
#pragma unroll
      for (int c = 0; c < Plan::kQueries / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int local_query = 8 * c + 2 * t + (e & 1);
          const bool visible = local_query < queries_left && key_inside[e / 2] &&
                               (!causal || key_local[e / 2] <= local_query + diagonal);
          st[4 * c + e] = visible ? fast_exp2(fmaf(st[4 * c + e], scale_log2, -kLog2e * lse_i[8 * c + 2 * t + (e & 1)])) : 0.0f;
        }
    }
    wgmma_wait<0>();
    pin(dpt);
    if constexpr (kDropout) {
      // dSᵀ = Pᵀ ∘ (dPᵀ ∘ Z/(1 − p) − D), then Pᵀ becomes P̃ᵀ for dV, Z from the tile's flags.
      const unsigned char* keep = keep_here + buffer * Plan::kQueries * Plan::kMaskLd;
#pragma unroll
      for (int c = 0; c < Plan::kQueries / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int local_query = 8 * c + 2 * t + (e & 1);
          const float factor = keep[local_query * Plan::kMaskLd + key_local[e / 2] - warpgroup * 64] ? dropout.scale : 0.0f;
          dpt[4 * c + e] = st[4 * c + e] * (dpt[4 * c + e] * factor - row_dot_i[8 * c + 2 * t + (e & 1)]);
          st[4 * c + e] *= factor;
        }
    }
    uint32_t pa[Plan::kQueries / 16][4];
#pragma unroll
    for (int kk = 0; kk < Plan::kQueries / 16; ++kk) as_a_fragment<T>(pa[kk], st, kk);

    // dSᵀ = Pᵀ ∘ (dPᵀ − D), D_i = rowsum(dO ∘ O) from the pre-pass over the whole row.
    if constexpr (!kDropout) {
#pragma unroll
      for (int c = 0; c < Plan::kQueries / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dpt[4 * c + e] = st[4 * c + e] * (dpt[4 * c + e] - row_dot_i[8 * c + 2 * t + (e & 1)]);
    }
    uint32_t dsa[Plan::kQueries / 16][4];
#pragma unroll
    for (int kk = 0; kk < Plan::kQueries / 16; ++kk) as_a_fragment<T>(dsa[kk], dpt, kk);
    // dSᵀ into shared memory for dQ before the dK products take dsa as their A operand (registers a
    // product reads may not be touched until it completes): register pair (c, h) of the fragments
    // is (key_local[h], queries 8c + 2t, +1); fragment kk = c/2 holds it in a[2·(c%2) + h]. Buffer
    // `buffer` was last read by the dQ products of tile it − 2: deferred, this warpgroup's own
    // finished in tile it − 1 (wgmma_wait) and the other's are waited for here; otherwise, with one
    // dQ tile (kDqParts == 1), both warpgroups finished them before they passed tile it − 1's block
    // barrier, and with partial tiles this warpgroup's own products alone read its rows, and each of
    // its threads waited for them (wgmma_wait) before its warpgroup barrier of tile it − 1.
    const uint32_t sdSi = sdS + (buffer % Plan::kDsBuffers) * DsTile::kBytes;
    if constexpr (Plan::kDqDeferred) {
      if (it >= 2) named_barrier_sync<Plan::kThreads>(Plan::kDsReadBarrier + 2 * other + buffer);
    }
    if constexpr (Plan::kDqTransposed) {
      // dS [queries][keys]: stmatrix's transpose turns each 8 keys × 8 queries block of a fragment
      // (fragment register j: keys +8·(j % 2), queries +8·(j / 2)) into 8 rows of queries, 16 bytes
      // of keys each; lane 8j + i gives the address of row i of block j.
      // Step kk's rows are 16 further on (the swizzle's row % 8 unchanged): one address, formed here.
      const int block = lane / 8;
      const uint32_t row_address = opaque(uint32_t(
          sdSi + DsTile::offset(8 * (block / 2) + lane % 8, warpgroup * 64 + warp * 16 + 8 * (block % 2))));
#pragma unroll
      for (int kk = 0; kk < Plan::kQueries / 16; ++kk) stmatrix_x4_trans(row_address + kk * 16 * 128, dsa[kk]);
    } else if constexpr (Plan::kQueries == 64) {
      unsigned char* ds_tile = generic_at(shared_raw, sdSi);
#pragma unroll
      for (int c = 0; c < Plan::kQueries / 8; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<uint32_t*>(ds_tile + DsTile::offset(key_local[h], 8 * c + 2 * t)) =
              dsa[c / 2][2 * (c % 2) + h];
    } else {
      // The same addresses, formed in the loop (held across it, the 32 of a 128-query tile spill):
      // DsTile::offset(key_local[h], 8c + 2t) is row_base + 1024h + panel c/8 + 16-byte chunk
      // (c % 8) ^ g, key_local[h] % 8 being g.
      unsigned char* row_base = generic_at(shared_raw, opaque(uint32_t(sdSi + key_local[0] * 128 + 4 * t)));
      const uint32_t hidden_g = opaque(uint32_t(g));
#pragma unroll
      for (int c = 0; c < Plan::kQueries / 8; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<uint32_t*>(row_base + 1024 * h + (c / 8) * DsTile::kPanelBytes +
                                       ((uint32_t(c % 8) ^ hidden_g) << 4)) = dsa[c / 2][2 * (c % 2) + h];
    }
    // dV += Pᵀ·dO and dK += dSᵀ·Q (scale applied once at the end), dO and Q read MN-major.
    const uint64_t do_t_desc = mn_major_base<QTile>(sdOi, 0), q_t_desc = mn_major_base<QTile>(sQi, 0);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Plan::kQueries / 16; ++kk)
      Wgmma<T, D>::template rs<1>(dv, pa[kk], advance(do_t_desc, mn_major_step<QTile>(kk)), 1);
#pragma unroll
    for (int kk = 0; kk < Plan::kQueries / 16; ++kk)
      Wgmma<T, D>::template rs<1>(dk, dsa[kk], advance(q_t_desc, mn_major_step<QTile>(kk)), 1);
    wgmma_commit();

    fence_proxy_async();
    // This warp is done with the stage (Q and dO by the products above, LSE and D before them) once
    // they completed; the last of the 8 refills it with the tile kStages further on.
    auto release_stage = [&] {
      uint32_t last = 0;
      if (lane == 0) last = ring.count_done();
      if (__shfl_sync(0xffffffffu, last, 0) && it + Plan::kStages < query_tiles) fetch(refill, stage);
    };
    if constexpr (Plan::kDqDeferred) {
      named_barrier_arrive<Plan::kThreads>(Plan::kDsStoredBarrier + 2 * warpgroup + buffer);
      // dQ of tile it − 1 (dS in the other buffer), once the other warpgroup's half is stored. The
      // sync counts every thread of this warpgroup, so the reducer's wait (its last dQ reduction
      // has read this warpgroup's part of the staging tile) comes before any of their stores. In
      // the first tile none is due, and the products run anyway, over K and V (read only here),
      // their result dropped: a product issued under a branch and waited for after it made ptxas
      // serialize the products and spill (C7512, 1.1 KB).
      float dq[kDqAccumulators];
      const bool dq_due = it > 0;
      if (dq_due) {
        if (reducer) bulk_wait_read();
        named_barrier_sync<Plan::kThreads>(Plan::kDsStoredBarrier + 2 * other + (buffer ^ 1));
      }
      issue_dq(dq, dq_due ? sdS + (buffer ^ 1) * DsTile::kBytes : sK);
      wgmma_wait<0>();
      pin(dk);
      pin(dv);
      pin(dq);
      if (dq_due) {
        // The other warpgroup stores tile it + 1's dS in that buffer once this one's products read it.
        if (it + 1 < query_tiles) named_barrier_arrive<Plan::kThreads>(Plan::kDsReadBarrier + 2 * warpgroup + (buffer ^ 1));
      }
      release_stage();
      if (dq_due) reduce_dq(dq, deferred_tile);
      deferred_tile = tile;
    } else {
      if (reducer) bulk_wait_read();  // this warpgroup's last dQ reduction has read its part of the tile
      // One dQ tile: all of dSᵀ is written (each warpgroup's products sum over both halves of the
      // keys); partial tiles: this warpgroup's half is, and its part of the dQ tile is free.
      if constexpr (Plan::kDqParts == 1)
        __syncthreads();
      else
        warpgroup_barrier(warpgroup);
      float dq[kDqAccumulators];
      issue_dq(dq, sdSi);
      wgmma_wait<0>();
      pin(dq);
      pin(dk);
      pin(dv);
      release_stage();
      reduce_dq(dq, tile);
    }
    ring.advance();
  }
  if constexpr (Plan::kDqDeferred) {
    // The last tile's dQ.
    if (query_tiles > 0) {
      const int last_buffer = (query_tiles - 1) & 1;
      if (reducer) bulk_wait_read();
      named_barrier_sync<Plan::kThreads>(Plan::kDsStoredBarrier + 2 * other + last_buffer);
      float dq[kDqAccumulators];
      issue_dq(dq, sdS + last_buffer * DsTile::kBytes);
      wgmma_wait<0>();
      pin(dq);
      reduce_dq(dq, deferred_tile);
    }
  }
  if (reducer) bulk_wait();

  // dK (scaled) and dV of this block's keys, each into its own accumulator. Added, not stored: where
  // the grid splits the group over gridDim.z, other blocks add their query heads' shares to the same
  // rows. A pair of columns per reduction (red.global.add.v2.f32, 8-byte aligned: kDim and 2t even).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!key_inside[h]) continue;
    const int64_t row = (kv_head * seq_k + k0 + key_local[h]) * kDim;
    float* dk_out = dk_accumulator + row;
    float* dv_out = dv_accumulator + row;
#pragma unroll
    for (int c = 0; c < kDim / 8; ++c) {
      atomicAdd(reinterpret_cast<float2*>(dk_out + 8 * c + 2 * t),
                make_float2(scale * dk[4 * c + 2 * h], scale * dk[4 * c + 2 * h + 1]));
      atomicAdd(reinterpret_cast<float2*>(dv_out + 8 * c + 2 * t), make_float2(dv[4 * c + 2 * h], dv[4 * c + 2 * h + 1]));
    }
  }
}

// ---- backward, head dims past 128 ------------------------------------------------------------------
//
// At d = 192 and 256 the loop above does not fit an SM: dK and dV of a warpgroup's 64 keys would take
// D registers a thread (256 at d = 256), and 128 keys of K and V beside two stages of Q and dO 256
// KiB of shared memory. Here a block owns 64 keys, and its two warpgroups split the work by product
// instead of by keys, so that no product is computed twice:
//   warpgroup 0:  Sᵀ = K·Qᵀ,  Pᵀ = exp(Sᵀ − LSE),             dV += Pᵀ·dO,  dQ's first panels
//   warpgroup 1:  dPᵀ = V·dOᵀ,  dSᵀ = Pᵀ ∘ (dPᵀ − D),         dK += dSᵀ·Q,  dQ's last panel(s)
// with dQ = dS·K split by 64-column panels of K. Each warpgroup holds one of dV, dK (D/2 registers a
// thread). Pᵀ passes from warpgroup 0 to 1 through shared memory in fp32, each thread's 32
// accumulator registers in a slot of their own (both warpgroups' threads hold the same elements of a
// 64×64 accumulator, so thread i of one reads exactly what thread i of the other wrote), and dSᵀ as
// the 16-bit tile that both dQ products read. Three named barriers hand them over:
//   kPReady  (0 arrives, 1 waits): Pᵀ of this tile is in the exchange;
//   kDsReady (1 arrives, 0 waits): dSᵀ of this tile is in its tile, so Pᵀ has been read;
//   kDsFree  (0 arrives, 1 waits): warpgroup 0's dQ products of the last tile have read dSᵀ.
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
  // Named barrier ids past __syncthreads' 0 and the warpgroup barriers' 1 and 2.
  static constexpr int kPReady = 3, kDsReady = 4, kDsFree = 5;
};

// grid (ceil(N_k/64) key blocks, BG, splits of the group), 256 threads; the operands and the walk
// over query tiles as for backward_kernel, with 64 keys a block. Head dim D = 192 or 256, tiles
// exactly that wide. kDropout: the mask of `dropout` redrawn per tile by warpgroup 0, which hands
// Pᵀ over with the sign bit set where the element was dropped (P ≥ 0, and where P = 0 so is dSᵀ),
// keeps P̃ᵀ for dV, and warpgroup 1 forms dSᵀ = Pᵀ ∘ (dPᵀ ∘ Z/(1 − p) − D).
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(256, 1)
    wide_backward_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                         const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap do_map,
                         const __grid_constant__ CUtensorMap dq_map, const float* __restrict__ lse,
                         const float* __restrict__ row_dot, float* dk_accumulator, float* dv_accumulator,
                         Extents extents, float scale, float scale_log2, philox::DropoutMask dropout) {
  using Plan = WideBackwardPlan<D, kDropout>;
  using KVTile = typename Plan::KVTile;
  using QTile = typename Plan::QTile;
  using DsTile = typename Plan::DsTile;
  using DqBox = typename Plan::DqBox;
  extern __shared__ unsigned char shared_raw[];
  const uint32_t sK = aligned_shared_base(shared_raw);
  const uint32_t sV = sK + KVTile::kBytes;
  const uint32_t sQ = sV + KVTile::kBytes;                     // [kStages]
  const uint32_t sdO = sQ + Plan::kStages * QTile::kBytes;     // [kStages]
  const uint32_t sdS = sdO + Plan::kStages * QTile::kBytes;
  const uint32_t sExchange = sdS + DsTile::kBytes;             // Pᵀ, then warpgroup 0's dQ boxes
  const uint32_t sBoxes1 = sExchange + Plan::kExchangeBytes;   // warpgroup 1's dQ boxes
  const uint32_t sLse = sBoxes1 + Plan::kBoxSlots1 * DqBox::kBytes;  // [kStages][64] fp32
  const uint32_t sRowDot = sLse + Plan::kStages * Plan::kQueries * 4;
  const uint32_t kv_full = sRowDot + Plan::kStages * Plan::kQueries * 4;
  StageRing<Plan::kStages, Plan::kWarps> ring{kv_full + 8, kv_full + 8 + 8 * Plan::kStages};  // Q, dO, LSE, D
  const float* lse_tile = reinterpret_cast<const float*>(generic_at(shared_raw, sLse));
  const float* row_dot_tile = reinterpret_cast<const float*>(generic_at(shared_raw, sRowDot));
  uint32_t* keep_bits = reinterpret_cast<uint32_t*>(generic_at(shared_raw, kv_full + Plan::kBarrierBytes));  // kDropout
  // Pᵀ's exchange: registers 4c..4c+3 of thread i at float4 c·128 + i (consecutive threads,
  // consecutive 16 bytes: no bank conflicts, 8 stores and 8 loads a thread).
  float4* exchange = reinterpret_cast<float4*>(generic_at(shared_raw, sExchange));

  const int64_t seq = extents.seq, seq_k = extents.seq_k;
  const int64_t kv_head = blockIdx.y, k0 = int64_t(blockIdx.x) * Plan::kKeys;
  const int thread = threadIdx.x, warpgroup = thread / kWarpgroupThreads, wg_thread = thread % kWarpgroupThreads;
  const int warp = wg_thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
  // Both warpgroups' accumulators cover the block's 64 keys: rows 16·warp + g and + 8.
  const int key_local[2] = {warp * 16 + g, warp * 16 + g + 8};
  const bool key_inside[2] = {k0 + key_local[0] < seq_k, k0 + key_local[1] < seq_k};

  const QueryWalk<Plan::kQueries> walk = QueryWalk<Plan::kQueries>::of(extents, k0, kv_head);
  const int query_tiles = walk.count;
  auto next_tile = [&](const QueryTile& tile) { return walk.next(tile); };
  auto fetch = [&](const QueryTile& tile, int stage) {  // by one whole warp
    fetch_query_tile<QTile>(q_map, do_map, lse, row_dot, seq, tile, stage, ring.barrier(stage), sQ, sdO, sLse,
                            sRowDot, lane);
  };

  if (thread == 0) {
    mbarrier_init(kv_full, 1);
    ring.init(shared_raw, 1 + 32);
    fence_mbarrier_init();
  }
  __syncthreads();
  QueryTile tile = walk.first;
  const bool first_warp = thread < 32;
  if (first_warp && lane == 0 && query_tiles > 0) {
    mbarrier_arrive_expect_bytes(kv_full, 2 * KVTile::kBytes);
    tma_load_tile<KVTile>(sK, k_map, k0, kv_head, kv_full);
    tma_load_tile<KVTile>(sV, v_map, k0, kv_head, kv_full);
  }
  QueryTile refill = tile;
  for (int stage = 0; stage < Plan::kStages; ++stage, refill = next_tile(refill))
    if (first_warp && stage < query_tiles) fetch(refill, stage);
  if (query_tiles > 0) mbarrier_wait(kv_full, 0);

  const bool reducer = wg_thread == 0;  // of each warpgroup: hands its dQ boxes to the copy engine
  // dQ's panel `panel` = dS·K (A = dSᵀ [keys][queries] read M-major, B = K's panel read N-major),
  // issued into dq [64 queries × 64 columns].
  auto dq_product = [&](float(&dq)[32], int panel) {
    const uint64_t ds_desc = opaque(mn_major_base<DsTile>(sdS, 0));
    const uint64_t k_t_desc = opaque(mn_major_base<KVTile>(sK, 64 * panel));
#pragma unroll
    for (int kk = 0; kk < Plan::kKeys / 16; ++kk)
      Wgmma<T, 64>::template ss<1, 1>(dq, advance(ds_desc, mn_major_step<DsTile>(kk)),
                                      advance(k_t_desc, mn_major_step<KVTile>(kk)), kk > 0);
  };
  // dq (panel `panel`) into two boxes of 32 columns, the warpgroup's boxes `first_box`, +1 of this
  // tile, box b into slot b % kSlots at `slots`; a slot already used in this tile waits until the
  // copy engine has read the box it held (the kSlots − 1 boxes since may still be pending). The
  // caller has made the slots free at the start of the tile.
  auto reduce_dq = [&](const float(&dq)[32], int panel, int first_box, uint32_t slots, auto slot_count,
                       int64_t q0, int64_t head) {
    constexpr int kSlots = decltype(slot_count)::value;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int box = first_box + half;
      const uint32_t slot = slots + (box % kSlots) * DqBox::kBytes;
      if (box >= kSlots) {
        if (reducer) bulk_wait_read<kSlots - 1>();
        warpgroup_barrier(warpgroup);
      }
      unsigned char* box_tile = generic_at(shared_raw, slot);
#pragma unroll
      for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 4 * (4 * half + c) + 2 * h;  // register of (row 16·warp + g + 8h, column 32·half + 8c + 2t)
          *reinterpret_cast<float2*>(box_tile + DqBox::offset(warp * 16 + g + 8 * h, 8 * c + 2 * t)) =
              make_float2(scale * dq[r], scale * dq[r + 1]);
        }
      fence_proxy_async();
      warpgroup_barrier(warpgroup);
      if (reducer) {
        tma_reduce_add_3d(dq_map, slot, 64 * panel + 32 * half, int(q0), int(head));
        bulk_commit();
      }
    }
  };
  // This warp is done with the stage: the last of the block's 8 refills it kStages tiles on.
  auto release_stage = [&](int it, const QueryTile& next, int stage) {
    uint32_t last = 0;
    if (lane == 0) last = ring.count_done();
    if (__shfl_sync(0xffffffffu, last, 0) && it + Plan::kStages < query_tiles) fetch(next, stage);
  };

  float grad[D / 2];  // warpgroup 0: dV, warpgroup 1: dK (unscaled) of the block's 64 keys × D
#pragma unroll
  for (int i = 0; i < D / 2; ++i) grad[i] = 0.0f;
  for (int it = 0; it < query_tiles; ++it, tile = next_tile(tile), refill = next_tile(refill)) {
    const int64_t q0 = tile.q0;
    const int stage = ring.stage;
    ring.wait();  // tile it is in shared memory
    const uint32_t sQi = sQ + stage * QTile::kBytes, sdOi = sdO + stage * QTile::kBytes;
    const float* lse_i = lse_tile + stage * Plan::kQueries;
    const float* row_dot_i = row_dot_tile + stage * Plan::kQueries;

    if (warpgroup == 0) {
      // Sᵀ = K·Qᵀ [64 keys × 64 queries].
      const uint64_t k_desc = opaque(k_major_base<KVTile>(sK, 0)), q_desc = k_major_base<QTile>(sQi, 0);
      float st[32];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        Wgmma<T, 64>::template ss<0, 0>(st, advance(k_desc, k_major_step<KVTile>(kk)),
                                        advance(q_desc, k_major_step<QTile>(kk)), kk > 0);
      wgmma_commit();
      // Dropout: this tile's keep flags while Sᵀ is on the tensor cores. The last tile's were read
      // before this warpgroup's barrier ahead of the exchange; the barrier after the exponentials
      // publishes these.
      if constexpr (kDropout)
        draw_keep_bits(dropout, uint64_t((tile.row_offset + q0) * seq_k + k0), seq_k, keep_bits, wg_thread);
      wgmma_wait<0>();
      pin(st);

      // Pᵀ = exp(Sᵀ − LSE), 0 where masked.
      probabilities_transposed<Plan::kKeys, Plan::kQueries>(st, lse_i, scale_log2, extents, q0, k0, key_local,
                                                           key_inside, t);
      if constexpr (kDropout) warpgroup_barrier(0);  // this tile's flags are drawn
      // Dropout: register 4c + e is (key key_local[e/2], query 8c + 2t + e%2); a dropped element goes
      // into the exchange as −P, and P̃ = P·Z/(1 − p) stays for dV.
      float exchanged[32];
#pragma unroll
      for (int r = 0; r < 32; ++r) exchanged[r] = st[r];
      if constexpr (kDropout) {
#pragma unroll
        for (int c = 0; c < 8; ++c)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int query = 8 * c + 2 * t + (e & 1), key = key_local[e / 2];
            const bool kept = (keep_bits[2 * query + key / 32] >> (key % 32)) & 1u;
            exchanged[4 * c + e] = kept ? st[4 * c + e] : -st[4 * c + e];
            st[4 * c + e] *= kept ? dropout.scale : 0.0f;
          }
      }

      // Pᵀ into the exchange. It is free: warpgroup 1 read the last tile's Pᵀ before dSᵀ was ready,
      // and the copy engine has read this warpgroup's dQ boxes staged there since.
      if (reducer) bulk_wait_read();
      warpgroup_barrier(0);
#pragma unroll
      for (int c = 0; c < 8; ++c)
        exchange[c * kWarpgroupThreads + wg_thread] =
            make_float4(exchanged[4 * c], exchanged[4 * c + 1], exchanged[4 * c + 2], exchanged[4 * c + 3]);
      named_barrier_arrive<Plan::kPReady, Plan::kThreads>();

      // dV += Pᵀ·dO, dO read MN-major.
      uint32_t pa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) as_a_fragment<T>(pa[kk], st, kk);
      const uint64_t do_t_desc = mn_major_base<QTile>(sdOi, 0);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) add_product_by_column_chunks<T, D, QTile>(grad, pa[kk], do_t_desc, kk);
      wgmma_commit();

      // dQ's first panels once dSᵀ is ready, a panel at a time (32 registers, not 64: d = 256 spilled).
      named_barrier_sync<Plan::kDsReady, Plan::kThreads>();
#pragma unroll
      for (int p = 0; p < Plan::kPanels0; ++p) {
        float dq[32];
        wgmma_fence();
        dq_product(dq, p);
        wgmma_commit();
        wgmma_wait<0>();
        pin(grad);
        pin(dq);
        if (p == 0) release_stage(it, refill, stage);  // Sᵀ has read Q, dV dO, the exponentials LSE
        if (p == Plan::kPanels0 - 1 && it + 1 < query_tiles)
          named_barrier_arrive<Plan::kDsFree, Plan::kThreads>();  // the last product has read dSᵀ
        reduce_dq(dq, p, 2 * p, sExchange, std::integral_constant<int, Plan::kBoxSlots0>{}, q0, tile.head);
      }
    } else {
      // dPᵀ = V·dOᵀ [64 keys × 64 queries].
      const uint64_t v_desc = opaque(k_major_base<KVTile>(sV, 0)), do_desc = k_major_base<QTile>(sdOi, 0);
      float dpt[32];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        Wgmma<T, 64>::template ss<0, 0>(dpt, advance(v_desc, k_major_step<KVTile>(kk)),
                                        advance(do_desc, k_major_step<QTile>(kk)), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      pin(dpt);

      // dSᵀ = Pᵀ ∘ (dPᵀ − D), Pᵀ from warpgroup 0 (0 where masked, so dSᵀ is too).
      named_barrier_sync<Plan::kPReady, Plan::kThreads>();
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const float4 p = exchange[c * kWarpgroupThreads + wg_thread];
        const float probability[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (kDropout) {  // dSᵀ = Pᵀ ∘ (dPᵀ ∘ Z/(1 − p) − D), Z from the sign
            const float factor = signbit(probability[e]) ? 0.0f : dropout.scale;
            dpt[4 * c + e] = fabsf(probability[e]) * (dpt[4 * c + e] * factor - row_dot_i[8 * c + 2 * t + (e & 1)]);
          } else {
            dpt[4 * c + e] = probability[e] * (dpt[4 * c + e] - row_dot_i[8 * c + 2 * t + (e & 1)]);
          }
        }
      }
      uint32_t dsa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) as_a_fragment<T>(dsa[kk], dpt, kk);

      // dSᵀ into its tile (register pair (c, h) is key_local[h], queries 8c + 2t, +1; fragment c/2
      // holds it in a[2·(c%2) + h]) once warpgroup 0's dQ products of the last tile have read it.
      if (it > 0) named_barrier_sync<Plan::kDsFree, Plan::kThreads>();
      store_transposed<DsTile>(generic_at(shared_raw, sdS), dsa, key_local, t);
      fence_proxy_async();
      named_barrier_arrive<Plan::kDsReady, Plan::kThreads>();
      warpgroup_barrier(1);  // this warpgroup's own dQ products read all of dSᵀ

      // dK += dSᵀ·Q (Q read MN-major), then dQ's other panels, a panel at a time.
      const uint64_t q_t_desc = mn_major_base<QTile>(sQi, 0);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) add_product_by_column_chunks<T, D, QTile>(grad, dsa[kk], q_t_desc, kk);
      wgmma_commit();
      // This warpgroup's boxes of the last tile have been read by the copy engine.
      if (reducer) bulk_wait_read();
      warpgroup_barrier(1);
#pragma unroll
      for (int p = 0; p < Plan::kPanels1; ++p) {
        float dq[32];
        wgmma_fence();
        dq_product(dq, Plan::kPanels0 + p);
        wgmma_commit();
        wgmma_wait<0>();
        pin(grad);
        pin(dq);
        if (p == 0) release_stage(it, refill, stage);  // dK has read Q, dPᵀ dO
        reduce_dq(dq, Plan::kPanels0 + p, 2 * p, sBoxes1, std::integral_constant<int, Plan::kBoxSlots1>{}, q0,
                  tile.head);
      }
    }
    ring.advance();
  }
  if (reducer) bulk_wait();

  // dV (warpgroup 0) into dv_accumulator, or dK (warpgroup 1, scaled) into dk_accumulator, for this
  // block's keys; added, as backward_kernel's, for the blocks of a split group, a column pair at a time.
  const float factor = warpgroup == 0 ? 1.0f : scale;
  float* const accumulator = warpgroup == 0 ? dv_accumulator : dk_accumulator;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!key_inside[h]) continue;
    float* out = accumulator + (kv_head * seq_k + k0 + key_local[h]) * D;
#pragma unroll
    for (int c = 0; c < D / 8; ++c)
      atomicAdd(reinterpret_cast<float2*>(out + 8 * c + 2 * t),
                make_float2(factor * grad[4 * c + 2 * h], factor * grad[4 * c + 2 * h + 1]));
  }
}

// ---- launchers -------------------------------------------------------------------------------------

// The tensor map of a [heads][rows][kDim] operand read in SwizzledTile boxes of box_rows rows.
template <class T>
CUtensorMap operand_map(const void* base, int64_t head_dim, int64_t rows, int64_t heads, int box_rows) {
  return swizzled_tile_map(base, std::is_same_v<T, __nv_bfloat16> ? Dtype::bf16 : Dtype::fp16, head_dim, rows, heads,
                           box_rows);
}

template <class T, int D, int kDim, bool kDropout>
void forward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                   cudaStream_t stream) {
  using Plan = ForwardPlan<D, kDropout>;
  constexpr int kSharedBytes = Plan::kSharedBytes + (kDropout ? Plan::kMaskBytes : 0);
  check_cuda(cudaFuncSetAttribute(forward_kernel<T, D, kDim, kDropout>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes),
             "cudaFuncSetAttribute(forward_kernel)");
  const int64_t heads = shape.heads_total, kv_heads = shape.kv_heads_total();
  forward_kernel<T, D, kDim, kDropout>
      <<<tile_grid(shape, Plan::kQueries), Plan::kThreads, kSharedBytes, stream>>>(
      operand_map<T>(Q, kDim, shape.seq, heads, Plan::kQueries), operand_map<T>(K, kDim, shape.seq_k, kv_heads, Plan::kKeys),
      operand_map<T>(V, kDim, shape.seq_k, kv_heads, Plan::kKeys), static_cast<T*>(O), lse, Extents::of(shape),
      shape.scale * kLog2e, shape.dropout);
  check_launch("forward_kernel (wgmma)");
}

// The number of SMs of the current device, asked once per device (a launch asks for it).
int multiprocessor_count() {
  static thread_local int cached_device = -1, cached_count = 1;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  if (device != cached_device) {
    check_cuda(cudaDeviceGetAttribute(&cached_count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    cached_device = device;
  }
  return cached_count;
}

// The backward grid: key blocks of `keys` along x, one row of them per K/V head, and the group's r
// query heads split over z until the grid has two blocks per SM (one block fits an SM), so that MQA
// at short N does not run a few blocks each walking every query head.
dim3 backward_grid(const LayerShape& shape, int keys) {
  if (shape.kv_heads_total() > 65535) throw RuntimeFailure("v2 on CUDA supports at most 65535 K/V heads (B·G)");
  const int64_t key_blocks = (shape.seq_k + keys - 1) / keys;
  const int64_t sms = multiprocessor_count();
  int64_t splits = 1;
  while (splits < shape.group_size && key_blocks * shape.kv_heads_total() * splits < 2 * sms) ++splits;
  const int64_t heads_per_split = (shape.group_size + splits - 1) / splits;
  splits = std::min<int64_t>((shape.group_size + heads_per_split - 1) / heads_per_split, 65535);  // none empty
  return dim3(static_cast<unsigned>(key_blocks), static_cast<unsigned>(shape.kv_heads_total()),
              static_cast<unsigned>(splits));
}

template <class T, int D, int kDim, bool kDropout>
void backward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                    const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                    float* dv_accumulator, cudaStream_t stream) {
  using Plan = BackwardPlan<D, kDropout>;
  constexpr int kSharedBytes = Plan::kSharedBytes;
  check_cuda(cudaFuncSetAttribute(backward_kernel<T, D, kDim, kDropout>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kSharedBytes),
             "cudaFuncSetAttribute(backward_kernel)");
  const int64_t heads = shape.heads_total, kv_heads = shape.kv_heads_total();
  backward_kernel<T, D, kDim, kDropout><<<backward_grid(shape, Plan::kKeys), Plan::kThreads, kSharedBytes, stream>>>(
      operand_map<T>(Q, kDim, shape.seq, heads, Plan::kQueries), operand_map<T>(K, kDim, shape.seq_k, kv_heads, Plan::kKeys),
      operand_map<T>(V, kDim, shape.seq_k, kv_heads, Plan::kKeys), operand_map<T>(dO, kDim, shape.seq, heads, Plan::kQueries),
      swizzled_tile_map(dq_accumulator, Dtype::fp32, kDim, shape.seq, heads, Plan::kDqBoxRows), lse, row_dot,
      dk_accumulator, dv_accumulator, Extents::of(shape), shape.scale, shape.scale * kLog2e, shape.dropout);
  check_launch("backward_kernel (wgmma)");
}

// d = 192 and 256: the by-product split (wide_backward_kernel).
template <class T, int D, bool kDropout>
void wide_backward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                         const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                         float* dv_accumulator, cudaStream_t stream) {
  using Plan = WideBackwardPlan<D, kDropout>;
  check_cuda(cudaFuncSetAttribute(wide_backward_kernel<T, D, kDropout>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Plan::kSharedBytes),
             "cudaFuncSetAttribute(wide_backward_kernel)");
  const int64_t heads = shape.heads_total, kv_heads = shape.kv_heads_total();
  wide_backward_kernel<T, D, kDropout><<<backward_grid(shape, Plan::kKeys), Plan::kThreads, Plan::kSharedBytes, stream>>>(
      operand_map<T>(Q, D, shape.seq, heads, Plan::kQueries), operand_map<T>(K, D, shape.seq_k, kv_heads, Plan::kKeys),
      operand_map<T>(V, D, shape.seq_k, kv_heads, Plan::kKeys), operand_map<T>(dO, D, shape.seq, heads, Plan::kQueries),
      swizzled_tile_map(dq_accumulator, Dtype::fp32, D, shape.seq, heads, Plan::kQueries), lse, row_dot,
      dk_accumulator, dv_accumulator, Extents::of(shape), shape.scale, shape.scale * kLog2e, shape.dropout);
  check_launch("wide_backward_kernel (wgmma)");
}

// The instance of the layer's storage type, head dim (64, 128, 192 and 256 in tiles of their width,
// 96 padded to 128) and dropout: body(kernels) with kernels.forward and kernels.backward. Past 128
// the backward is wide_backward_kernel's.
template <class T, int D, int kDim, bool kDropout>
struct Kernels {
  static void forward(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                      cudaStream_t stream) {
    forward_typed<T, D, kDim, kDropout>(shape, Q, K, V, O, lse, stream);
  }
  static void backward(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                       const float* lse, const float* row_dot, float* dq, float* dk, float* dv,
                       cudaStream_t stream) {
    if constexpr (D > 128)
      wide_backward_typed<T, D, kDropout>(shape, Q, K, V, dO, lse, row_dot, dq, dk, dv, stream);
    else
      backward_typed<T, D, kDim, kDropout>(shape, Q, K, V, dO, lse, row_dot, dq, dk, dv, stream);
  }
};

template <class Body>
void by_layer(const LayerShape& shape, Body&& body) {
  dispatch_16bit(shape.dtype, [&](auto element) {
    dispatch_dropout(shape.dropout.active(), [&](auto dropout) {
      using T = decltype(element);
      if (shape.head_dim == 64) return body(Kernels<T, 64, 64, dropout()>{});
      if (shape.head_dim == 96) return body(Kernels<T, 128, 96, dropout()>{});
      if (shape.head_dim == 192) return body(Kernels<T, 192, 192, dropout()>{});
      if (shape.head_dim == 256) return body(Kernels<T, 256, 256, dropout()>{});
      if (shape.head_dim != 128)
        throw RuntimeFailure("internal error: no wgmma instance for head_dim " + std::to_string(shape.head_dim));
      body(Kernels<T, 128, 128, dropout()>{});
    });
  });
}

}  // namespace

void flash_forward_wgmma(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                         cudaStream_t stream) {
  by_layer(shape, [&](auto kernels) { kernels.forward(shape, Q, K, V, O, lse, stream); });
}

void flash_backward_wgmma(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                          const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                          float* dv_accumulator, cudaStream_t stream) {
  by_layer(shape, [&](auto kernels) {
    kernels.backward(shape, Q, K, V, dO, lse, row_dot, dq_accumulator, dk_accumulator, dv_accumulator, stream);
  });
}

}  // namespace flashbench::cuda
