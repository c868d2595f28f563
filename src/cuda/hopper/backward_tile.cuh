#pragma once
// The steps of one query tile of backward_kernel (head dims up to 128) that stand alone: the
// products Sᵀ, dPᵀ and dV, dK, the probabilities Pᵀ, and dSᵀ into shared memory for dQ. The
// kernel's loop keeps its state (the tile cursors, the accumulators) as arrays of its own and
// passes them down by reference. Included by flash_wgmma.cu alone: its names live in that file's
// anonymous namespace, as the kernels do.
#include <cstdint>

#include "../flash_common.cuh"
#include "../hopper.cuh"
#include "accumulators.cuh"
#include "barriers.cuh"
#include "plans.cuh"
#include "query_walk.cuh"
#include "stage_ring.cuh"

namespace flashbench::cuda {
namespace {

using namespace hopper;

// Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for this warpgroup's 64 keys × kQueries queries (K and V at sK and sV,
// the tile's Q and dO at sQi and sdOi), as two commit groups: the exponentials of Pᵀ run while dPᵀ is
// still on the tensor cores.
template <class T, class Plan, int kDim>
__device__ __forceinline__ void issue_scores_transposed(float (&st)[Plan::kQueries / 2],
                                                        float (&dpt)[Plan::kQueries / 2], uint32_t sK, uint32_t sV,
                                                        uint32_t sQi, uint32_t sdOi, int warpgroup) {
  using KVTile = typename Plan::KVTile;
  using QTile = typename Plan::QTile;
  const uint64_t k_desc = opaque(k_major_base<KVTile>(sK, warpgroup * 64));
  const uint64_t v_desc = opaque(k_major_base<KVTile>(sV, warpgroup * 64));
  const uint64_t q_desc = k_major_base<QTile>(sQi, 0), do_desc = k_major_base<QTile>(sdOi, 0);
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
}

// dSᵀ = Pᵀ ∘ (dPᵀ − D) in place of dPᵀ (dpt), D_i = rowsum(dO ∘ O) from the pre-pass over the whole
// row (row_dot_i: the tile's), st: Pᵀ; register 4c + e is query 8c + 2t + e%2.
template <int kQueries>
__device__ __forceinline__ void scores_gradient(const float (&st)[kQueries / 2], float (&dpt)[kQueries / 2],
                                                const float* row_dot_i, int t) {
#pragma unroll
  for (int c = 0; c < kQueries / 8; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dpt[4 * c + e] = st[4 * c + e] * (dpt[4 * c + e] - row_dot_i[8 * c + 2 * t + (e & 1)]);
}

// Dropout: dSᵀ = Pᵀ ∘ (dPᵀ ∘ Z/(1 − p) − D) in place of dPᵀ, then Pᵀ becomes P̃ᵀ for dV, Z from the
// tile's keep flags `keep` [queries][kMaskLd] of this warpgroup's 64 keys (register 4c + e: key
// key_local[e/2], query 8c + 2t + e%2); `scale`: 1/(1 − p).
template <class Plan>
__device__ __forceinline__ void dropout_scores_gradient(float (&st)[Plan::kQueries / 2],
                                                        float (&dpt)[Plan::kQueries / 2], const float* row_dot_i,
                                                        const unsigned char* keep, float scale,
                                                        const int (&key_local)[2], int warpgroup, int t) {
#pragma unroll
  for (int c = 0; c < Plan::kQueries / 8; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int local_query = 8 * c + 2 * t + (e & 1);
      const float factor = keep[local_query * Plan::kMaskLd + key_local[e / 2] - warpgroup * 64] ? scale : 0.0f;
      dpt[4 * c + e] = st[4 * c + e] * (dpt[4 * c + e] * factor - row_dot_i[8 * c + 2 * t + (e & 1)]);
      st[4 * c + e] *= factor;
    }
}

// dSᵀ (its A fragments dsa) into the DsTile at sdSi for dQ: register pair (c, h) of the fragments is
// (key_local[h], queries 8c + 2t, +1); fragment kk = c/2 holds it in a[2·(c%2) + h].
template <class Plan>
__device__ __forceinline__ void store_ds_tile(const uint32_t (&dsa)[Plan::kQueries / 16][4], uint32_t sdSi,
                                              const int (&key_local)[2], int warpgroup, int warp, int lane, int g,
                                              int t) {
  using DsTile = typename Plan::DsTile;
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
}

// dV += Pᵀ·dO and dK += dSᵀ·Q (scale applied once at the end), dO and Q (the tile's, at sdOi and
// sQi) read MN-major, one commit group; pa and dsa: Pᵀ and dSᵀ as A fragments.
template <class T, class Plan, int D>
__device__ __forceinline__ void issue_key_gradients(float (&dk)[D / 2], float (&dv)[D / 2],
                                                    const uint32_t (&pa)[Plan::kQueries / 16][4],
                                                    const uint32_t (&dsa)[Plan::kQueries / 16][4], uint32_t sQi,
                                                    uint32_t sdOi) {
  using QTile = typename Plan::QTile;
  const uint64_t do_t_desc = mn_major_base<QTile>(sdOi, 0), q_t_desc = mn_major_base<QTile>(sQi, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Plan::kQueries / 16; ++kk)
    Wgmma<T, D>::template rs<1>(dv, pa[kk], advance(do_t_desc, mn_major_step<QTile>(kk)), 1);
#pragma unroll
  for (int kk = 0; kk < Plan::kQueries / 16; ++kk)
    Wgmma<T, D>::template rs<1>(dk, dsa[kk], advance(q_t_desc, mn_major_step<QTile>(kk)), 1);
  wgmma_commit();
}

// How a backward_kernel warpgroup forms dQ of a tile: transposed (80 queries), dQᵀ = Kᵀ·dSᵀ for this
// warpgroup's 64 columns of D over all 128 keys, A = K read M-major, B = dS [queries][keys] read
// K-major. Otherwise dQ = dS·K for 64 queries (query_row0.. of the tile: dSᵀ's panel query_row0/64):
// A = dSᵀ [keys][queries] read M-major, B = K [keys][D] read N-major, the split of kDqParts
// (plans.cuh): over all 128 keys, or over this warpgroup's own 64 (k-steps 4w..4w+3, from first_step).
template <class Plan>
struct DqProducts {
  static constexpr int kSteps = Plan::kDqParts == 1 ? Plan::kKeys / 16 : 4;
  static constexpr int kAccumulators = Plan::kDqTransposed ? Plan::kQueries / 2 : 32;
};

// dQ of a tile, its dS in the buffer at sdS_dq (K at sK): the products issued and committed, not
// waited for.
template <class T, class Plan, int D>
__device__ __forceinline__ void issue_dq_products(float (&dq)[DqProducts<Plan>::kAccumulators], uint32_t sdS_dq,
                                                  uint32_t sK, int warpgroup, int first_step, int query_row0) {
  using KVTile = typename Plan::KVTile;
  using DsTile = typename Plan::DsTile;
  constexpr int kDqSteps = DqProducts<Plan>::kSteps;
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
}

// Each warpgroup writes its part of dQ (its 64 columns, its 64 queries, or its own partial tile) to
// the staging tile at sDq and one of its threads (reducer) hands it to the copy engine, which adds it
// into the accumulator of dq_map a [kDqBoxRows rows][32 columns] box at a time (rows past N and
// columns past kDim are dropped): no block-wide barrier needed.
template <class Plan, int D, int kDim, bool kDropout>
__device__ __forceinline__ void reduce_dq_tile(const float (&dq)[DqProducts<Plan>::kAccumulators],
                                               const QueryTile& query_tile, const CUtensorMap& dq_map, uint32_t sDq,
                                               float scale, int warpgroup, int warp, int g, int t, int query_row0,
                                               bool reducer) {
  using DqTile = typename Plan::DqTile;
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
}

}  // namespace
}  // namespace flashbench::cuda
