#pragma once
// The transposed tiles of the backward pass: Pᵀ = exp(Sᵀ − LSE) in the registers of an Sᵀ
// accumulator (both backward kernels), and dSᵀ from its A fragments into a shared-memory tile
// (wide_backward_kernel; backward_kernel's store_ds_tile takes its other layouts too). Included
// by flash_wgmma.cu alone: its names live in that file's anonymous namespace, as the kernels do.
#include <cstdint>

#include "../flash_common.cuh"
#include "../hopper.cuh"
#include "accumulators.cuh"
#include "plans.cuh"

namespace flashbench::cuda {
namespace {

using namespace hopper;

// Pᵀ = exp(Sᵀ − LSE) in place over a warpgroup's Sᵀ accumulator [64 keys × kQueries queries] (the
// forward pass's P_ij = exp(S_ij − LSE_i), transposed), 0 where masked. In 32-bit tile coordinates: query
// q0 + lq exists when lq < queries_left, and sees key k0 + lk when lk <= lq + diagonal. Interior
// tiles (every query and key exists, every key is seen by every query) skip the test. The block has
// kKeys keys from k0; register 4c + e holds key key_local[e/2] of the block (key_inside: it exists)
// and query 8c + 2t + e%2 of the tile; lse_row: the tile's LSE (natural log).
template <int kKeys, int kQueries>
__device__ __forceinline__ void probabilities_transposed(float (&st)[kQueries / 2], const float* lse_row, float scale_log2,
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
    for (int c = 0; c < kQueries / 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        st[4 * c + e] = fast_exp2(fmaf(st[4 * c + e], scale_log2, -kLog2e * lse_row[8 * c + 2 * t + (e & 1)]));
  } else {
#pragma unroll
    for (int c = 0; c < kQueries / 8; ++c)
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

}  // namespace
}  // namespace flashbench::cuda
