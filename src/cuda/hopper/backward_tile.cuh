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
#include "plans.cuh"
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

}  // namespace
}  // namespace flashbench::cuda
