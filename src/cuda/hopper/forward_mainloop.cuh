#pragma once
// forward_kernel's block: its shared memory, the K/V tiles its warpgroups walk, and the mainloop
// over them (S = Q·Kᵀ, online softmax, O += P·V). Included by flash_wgmma.cu alone: its names live
// in that file's anonymous namespace, as the kernels do.
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
#include <cstdint>
#include <type_traits>

#include "../flash_common.cuh"
#include "../hopper.cuh"
#include "accumulators.cuh"
#include "barriers.cuh"
#include "dropout.cuh"
#include "plans.cuh"
#include "stage_ring.cuh"

namespace flashbench::cuda {
namespace {

using namespace hopper;

// One warpgroup's walk over the K/V tiles of a forward block (start(), then run()).
template <class T, int D, int kDim, bool kDropout>
struct ForwardMainloop {
  using Plan = ForwardPlan<D, kDropout>;
  using QTile = typename Plan::QTile;
  using KVTile = typename Plan::KVTile;
  using Ring = StageRing<Plan::kStages, Plan::kWarps>;
  // S's and P's registers: [64 rows × kKeys keys] a warpgroup.
  using Scores = float[Plan::kKeys / 2];
  using Probabilities = uint32_t[Plan::kKeys / 16][4];  // 16-bit A fragments, one per k-step
  using Output = float[D / 2];                          // O [64 rows × D]
  using FullWidth = std::integral_constant<int, Plan::kKeys>;
  static constexpr int kRows = Plan::kRowsPerWarpgroup;
  static_assert(!kDropout || Plan::kWarpgroups == 2, "the keep flags' warpgroup_barrier has ids for two warpgroups");

  const CUtensorMap& q_map;
  const CUtensorMap& k_map;
  const CUtensorMap& v_map;
  const philox::DropoutMask& dropout;
  float scale_log2;
  uint32_t sQ, sK, sV;  // Q; [kStages] K tiles; [kStages] V tiles
  uint32_t q_full;      // Q's mbarrier
  // V's ring before K's: the order of these members sets that of the compiler's registers for the
  // rings' stage and phase, and the other order changes ptxas's schedule of the overlapped kernels.
  Ring v_ring;          // V, overlapped
  Ring k_ring;          // K, or K and V in turn
  unsigned char* keep_tiles;  // kDropout: [wg][2][64][kMaskLd]
  unsigned char* keep_here;   // kDropout: this warpgroup's two flag buffers
  int64_t seq, seq_k, shift;
  bool causal;
  int64_t head, q0;       // the block's query head and first query
  int64_t offset;         // of the head in Q and O
  int64_t kv_head;
  int thread, warpgroup, warp, lane, g, t;
  int64_t first_row;      // the warpgroup's
  const int64_t (&row)[2];  // this thread's rows: 16·warp + g and + 8 of the warpgroup's
  int key_tiles;          // the block's tiles
  int own_tiles;          // those this warpgroup's rows see
  int last_width;         // the keys of its last tile that O's product reads: 64, 128 or kKeys

  // The block's layout and its warpgroups' share of the tiles; sets this thread's rows in rows_
  // (the kernel's array: its epilogue stores them). Causal query blocks further down see more keys:
  // the grid launches those first (blockIdx.x reversed) so short ones fill the tail.
  __device__ __forceinline__ ForwardMainloop(const CUtensorMap& q, const CUtensorMap& k, const CUtensorMap& v,
                                             Extents extents, float scale_log2_, const philox::DropoutMask& dropout_,
                                             int64_t (&rows_)[2])
      : q_map(q), k_map(k), v_map(v), dropout(dropout_), scale_log2(scale_log2_), row(rows_) {
    sQ = aligned_shared_base(shared_raw);
    sK = sQ + QTile::kBytes;
    sV = sK + Plan::kStages * KVTile::kBytes;
    q_full = sV + Plan::kStages * KVTile::kBytes;
    k_ring = Ring{q_full + 8, q_full + 8 + 8 * Plan::kStages};
    v_ring = Ring{q_full + 8 + Plan::kRingBytes, q_full + 8 + Plan::kRingBytes + 8 * Plan::kStages};
    keep_tiles = generic_at(shared_raw, q_full + Plan::kBarrierBytes);

    seq = extents.seq, seq_k = extents.seq_k, shift = seq_k - seq;
    causal = extents.causal;
    head = blockIdx.y, q0 = int64_t(gridDim.x - 1 - blockIdx.x) * Plan::kQueries;
    offset = head * seq * kDim, kv_head = head / extents.group_size;
    // The warpgroup through a shuffle from lane 0: the compiler then knows it is the same across the
    // warp, so what depends on it (this warpgroup's tile count, the loops' bounds and branches) stays
    // warp-uniform, in uniform registers, as the products' descriptors need.
    thread = threadIdx.x, warpgroup = __shfl_sync(0xffffffffu, thread / kWarpgroupThreads, 0);
    warp = (thread % kWarpgroupThreads) / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
    first_row = q0 + warpgroup * Plan::kRowsPerWarpgroup;
    rows_[0] = first_row + warp * 16 + g, rows_[1] = first_row + warp * 16 + g + 8;

    // The block's tiles, and those of this warpgroup's rows: fewer where causal rows above the
    // block's last stop short of its last tile (with 192-query blocks at d = 64, 1.11× fewer tiles at
    // N = 2K, 1.09× at 4K). The block's last rows see every tile, so each tile still has a warpgroup
    // that computes it.
    key_tiles = tiles_seen(q0, Plan::kQueries);
    own_tiles = tiles_seen(first_row, Plan::kRowsPerWarpgroup);
    // The warpgroup's last tile holds keys none of its rows see where it ends past N_k or past the
    // causal diagonal. In the overlapped loop its O += P·V then runs over the narrowest width, 64 or
    // 128 keys, that holds the keys its rows see: `last_width` (kKeys where nothing narrower does);
    // past it P is 0. (Narrowing the S products too, or the in-turn loop's, makes ptxas serialize
    // the products (C7511) or spill at d = 96 and 128, and the d = 64 forward 1.06–1.14× slower.)
    const int keys_in_last_tile =
        own_tiles > 0 ? int(last_key_seen(first_row, Plan::kRowsPerWarpgroup) - int64_t(own_tiles - 1) * Plan::kKeys) + 1
                      : 0;
    last_width = keys_in_last_tile <= 64 && Plan::kKeys > 64     ? 64
                 : keys_in_last_tile <= 128 && Plan::kKeys > 128 ? 128
                                                                 : Plan::kKeys;
  }

  // The last key rows [first, first + rows) see: the last row's last key (the last row of the
  // problem for rows past N); −1 for rows all past N, or for rows above a bottom-right diagonal that
  // starts below them (their O stays 0).
  __device__ __forceinline__ int64_t last_key_seen(int64_t first, int64_t rows) const {
    return first >= seq ? -1 : causal ? min(min(first + rows - 1, seq - 1) + shift, seq_k - 1) : seq_k - 1;
  }
  // The key tiles rows [first, first + rows) see.
  __device__ __forceinline__ int tiles_seen(int64_t first, int64_t rows) const {
    const int64_t last_key = last_key_seen(first, rows);
    return last_key < 0 ? 0 : int(last_key / Plan::kKeys) + 1;
  }

  // ---- the rings ----

  // By one thread: V_j into stage `stage`, completing on mbarrier `full`.
  __device__ __forceinline__ void load_value_tile(int j, int stage, uint32_t full) {
    tma_load_tile<KVTile>(sV + stage * KVTile::kBytes, v_map, int64_t(j) * Plan::kKeys, kv_head, full);
  }
  // By one thread: tile j into stage `stage` of k_ring (K_j, and V_j where one ring holds both), or
  // of v_ring (V_j).
  __device__ __forceinline__ void fetch_key_tile(int j, int stage) {
    const uint32_t full = k_ring.barrier(stage);
    mbarrier_arrive_expect_bytes(full, (Plan::kOverlapSoftmax ? 1 : 2) * KVTile::kBytes);
    tma_load_tile<KVTile>(sK + stage * KVTile::kBytes, k_map, int64_t(j) * Plan::kKeys, kv_head, full);
    if constexpr (!Plan::kOverlapSoftmax) load_value_tile(j, stage, full);
  }
  __device__ __forceinline__ void fetch_value_tile(int j, int stage) {
    const uint32_t full = v_ring.barrier(stage);
    mbarrier_arrive_expect_bytes(full, KVTile::kBytes);
    load_value_tile(j, stage, full);
  }
  // This warp is done with tile j of the ring (its lane 0 counts it); the last of the block's warps
  // refills the stage with tile j + kStages. Then the ring moves on.
  __device__ __forceinline__ void release_keys(int j) {  // K_j (and V_j in turn)
    if (lane == 0 && k_ring.count_done() && j + Plan::kStages < key_tiles) fetch_key_tile(j + Plan::kStages, k_ring.stage);
    k_ring.advance();
  }
  __device__ __forceinline__ void release_values(int j) {
    if (lane == 0 && v_ring.count_done() && j + Plan::kStages < key_tiles)
      fetch_value_tile(j + Plan::kStages, v_ring.stage);
    v_ring.advance();
  }

  // The mbarriers set up and published, Q and the first kStages tiles on their way (thread 0), the
  // first tile's keep flags drawn; returns once Q is in shared memory (for warpgroups with tiles).
  __device__ __forceinline__ void start() {
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
    keep_here = keep_tiles + warpgroup * 2 * kRows * Plan::kMaskLd;
    if constexpr (kDropout) {
      if (own_tiles > 0) draw_tile_flags(0);
    }
    if (own_tiles > 0) mbarrier_wait(q_full, 0);
  }

  // Dropout: this warpgroup's keep flags of key tile `j` for its 64 queries, into flag buffer j % 2,
  // drawn by its 128 threads; a warpgroup barrier at the top of each tile orders the draws before
  // the reads and the last tile's reads before the next draws.
  __device__ __forceinline__ void draw_tile_flags(int j) {
    draw_keep_flags<kRows, Plan::kKeys, Plan::kMaskLd, kWarpgroupThreads>(
        dropout, uint64_t((head * seq + q0 + warpgroup * kRows) * seq_k + int64_t(j) * Plan::kKeys), seq_k,
        keep_here + (j & 1) * kRows * Plan::kMaskLd, thread % kWarpgroupThreads);
  }

  // ---- the products ----

  // S_j = Q·K_jᵀ [64 rows × kKeys keys] over the k-steps of the head dim that hold data, issued as
  // one commit group.
  __device__ __forceinline__ void issue_scores(Scores& s) const {
    const uint64_t q_desc = opaque(k_major_base<QTile>(sQ, warpgroup * 64));
    const uint64_t k_desc = k_major_base<KVTile>(sK + k_ring.stage * KVTile::kBytes, 0);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDepthSteps<kDim>; ++kk)
      Wgmma<T, Plan::kKeys>::template ss<0, 0>(s, advance(q_desc, k_major_step<QTile>(kk)),
                                                advance(k_desc, k_major_step<KVTile>(kk)), kk > 0);
    wgmma_commit();
  }
  // V's descriptor: of the current stage of v_ring, or of k_ring where one ring holds K and V.
  __device__ __forceinline__ uint64_t values_desc() const {
    return mn_major_base<KVTile>(sV + (Plan::kOverlapSoftmax ? v_ring.stage : k_ring.stage) * KVTile::kBytes, 0);
  }
  // O += P·V over the width's keys (a std::integral_constant), P from registers (16-bit A
  // fragments), V [keys × D] read MN-major, one commit group.
  template <class Width>
  __device__ __forceinline__ static void issue_values(Output& o, const Probabilities& p, uint64_t v_desc, Width) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Width::value / 16; ++kk) add_product_by_column_chunks<T, D, KVTile>(o, p[kk], v_desc, kk);
    wgmma_commit();
  }
  // The product's width as a compile-time constant (std::integral_constant; chosen at run time
  // inside the product, the branches make ptxas serialize the products): calls f with 64, 128 or
  // kKeys as such a constant.
  template <class F>
  __device__ __forceinline__ static void with_width(int width, const F& f) {
    if (Plan::kKeys > 64 && width == 64)
      f(std::integral_constant<int, 64>{});
    else if (Plan::kKeys > 128 && width == 128)
      f(std::integral_constant<int, (Plan::kKeys > 128 ? 128 : 64)>{});
    else
      f(FullWidth{});
  }

  // ---- the softmax ----

  // The online softmax of tile j's scores s: masked scores (past N_k, or right of the diagonal) to 0,
  // the others to exp2(s·scale_log2 − m) with m the running max (log2 units), l (this thread's
  // partial sums) updated; sets alpha to α, the
  // factor that takes O from the old max to the new one. The test is skipped on interior tiles, where
  // every key exists and every row of the warpgroup sees every key. The scores stay unscaled: the
  // scale (> 0) goes into the maximum once and into each exponent's FMA.
  __device__ __forceinline__ void softmax_tile(Scores& s, int j, float (&m)[2], float (&l)[2], float (&alpha)[2]) {
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
  }
  // O ·= α, row by row.
  __device__ __forceinline__ static void rescale_output(Output& o, const float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < D / 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * c + e] *= alpha[e / 2];
  }
  // P to 16 bits, pinned there: the packing reads S, which the next S product overwrites, so it
  // stays before that product's fence (the overlapped loop issues the product next).
  __device__ __forceinline__ static void pack_probabilities(Probabilities& p, const Scores& s) {
#pragma unroll
    for (int kk = 0; kk < Plan::kKeys / 16; ++kk) as_a_fragment<T>(p[kk], s, kk);
#pragma unroll
    for (int kk = 0; kk < Plan::kKeys / 16; ++kk) pin(p[kk]);
  }
  // Ties O and P to this point: their writes (O's scaling, P's packing) stay before the fence of the
  // product that reads them, and after a wait, the end of that product's reads stays before them.
  __device__ __forceinline__ static void pin_operands(Probabilities& p, Output& o) {
#pragma unroll
    for (int kk = 0; kk < Plan::kKeys / 16; ++kk) pin(p[kk]);
    pin(o);
  }

  // ---- the loop ----

  // O [64 rows × D] (unnormalised) of this warpgroup's rows over their tiles, with their running
  // max m (log2 units) and this thread's partial sums l, in one of the two forms; then the block's
  // tiles past its rows, each counted done once it is in shared memory, as the ring needs. s, p and
  // alpha: the loop's registers (S_j, P in 16 bits, α), the kernel's arrays as o, m and l are.
  __device__ __forceinline__ void run(Output& o, Scores& s, Probabilities& p, float (&alpha)[2], float (&m)[2],
                                     float (&l)[2]) {
    if constexpr (Plan::kOverlapSoftmax)
      run_overlapped(o, s, p, m, l, alpha);
    else
      run_in_turn(o, s, p, m, l, alpha);
    // A stage is refilled when all the block's warps have passed it, and waiting for tile j first
    // keeps this warp's count of it from joining that of tile j − kStages.
    for (int j = own_tiles; j < key_tiles; ++j) {
      k_ring.wait();
      release_keys(j);
      if constexpr (Plan::kOverlapSoftmax) {
        v_ring.wait();
        release_values(j);
      }
    }
  }

  // The softmax of tile j under the product of tile j − 1.
  __device__ __forceinline__ void run_overlapped(Output& o, Scores& s, Probabilities& p, float (&m)[2], float (&l)[2],
                                                 float (&alpha)[2]) {
    if (own_tiles > 0) {
      k_ring.wait();
      issue_scores(s);
      wgmma_wait<0>();
      pin(s);
      release_keys(0);
      softmax_tile(s, 0, m, l, alpha);  // O is 0: α_0 is not needed
      pack_probabilities(p, s);
    }
    for (int j = 1; j < own_tiles; ++j) {
      k_ring.wait();  // K_j is in shared memory
      issue_scores(s);
      // By α_{j−1}. Not at j = 1, where O is 0: scaling its zeros by α_0 = 0 too (no branch) makes
      // ptxas serialize the d = 96 kernel's products for want of registers.
      if (j > 1) rescale_output(o, alpha);
      pin_operands(p, o);
      v_ring.wait();  // V_{j−1}, not the last tile
      issue_values(o, p, values_desc(), FullWidth{});
      wgmma_wait<1>();
      pin(s);
      release_keys(j);
      softmax_tile(s, j, m, l, alpha);
      wgmma_wait<0>();
      pin_operands(p, o);  // P_{j−1} is read until here
      release_values(j - 1);
      pack_probabilities(p, s);
    }
    if (own_tiles > 0) {
      if (own_tiles > 1) rescale_output(o, alpha);
      pin_operands(p, o);
      v_ring.wait();
      with_width(last_width, [&](auto width) { issue_values(o, p, values_desc(), width); });
      wgmma_wait<0>();
      pin(o);
      release_values(own_tiles - 1);
    }
  }

  // S_j, its softmax and O += P_j·V_j in turn.
  __device__ __forceinline__ void run_in_turn(Output& o, Scores& s, Probabilities& p, float (&m)[2], float (&l)[2],
                                              float (&alpha)[2]) {
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
      softmax_tile(s, j, m, l, alpha);
      rescale_output(o, alpha);  // α_0 = 0 multiplies the zeros of O
      pack_probabilities(p, s);
      pin_operands(p, o);
      issue_values(o, p, v_desc, FullWidth{});
      wgmma_wait<0>();
      pin(o);
      release_keys(j);  // K_j and V_j
    }
  }
};

}  // namespace
}  // namespace flashbench::cuda
