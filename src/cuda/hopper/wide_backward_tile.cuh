#pragma once
// The steps of one query tile of wide_backward_kernel (head dims 192 and 256) that stand alone, for
// the warpgroup that computes them (WideBackwardPlan, plans.cuh): the products over the head dim
// (Sᵀ, dPᵀ), the ones that add into dV or dK, the hand-over of Pᵀ through the exchange, dQ's panels
// and their boxes for the copy engine. The kernel's loop keeps its state (the tile
// cursors, the accumulators) as arrays of its own and passes them down by reference. Included by
// flash_wgmma.cu alone: its names live in that file's anonymous namespace, as the kernels do.
#include <cstdint>

#include "../flash_common.cuh"
#include "../hopper.cuh"
#include "accumulators.cuh"
#include "barriers.cuh"
#include "plans.cuh"
#include "stage_ring.cuh"

namespace flashbench::cuda {
namespace {

using namespace hopper;

// acc [64 keys × 64 queries] = A·Bᵀ over the head dim, A the block's K or V tile at a_tile, B the
// tile's Q or dO at b_tile, both read K-major: Sᵀ = K·Qᵀ or dPᵀ = V·dOᵀ, one commit group.
template <class T, class Plan, int D>
__device__ __forceinline__ void issue_keys_by_queries(float (&acc)[32], uint32_t a_tile, uint32_t b_tile) {
  using KVTile = typename Plan::KVTile;
  using QTile = typename Plan::QTile;
  const uint64_t a_desc = opaque(k_major_base<KVTile>(a_tile, 0)), b_desc = k_major_base<QTile>(b_tile, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    Wgmma<T, 64>::template ss<0, 0>(acc, advance(a_desc, k_major_step<KVTile>(kk)),
                                    advance(b_desc, k_major_step<QTile>(kk)), kk > 0);
  wgmma_commit();
}

// grad [64 keys × D] += a·B, a the A fragments of Pᵀ or dSᵀ, B the tile's dO or Q at b_tile read
// MN-major: dV += Pᵀ·dO or dK += dSᵀ·Q, one commit group.
template <class T, class Plan, int D>
__device__ __forceinline__ void add_keys_by_columns(float (&grad)[D / 2], const uint32_t (&a)[4][4], uint32_t b_tile) {
  using QTile = typename Plan::QTile;
  const uint64_t b_t_desc = mn_major_base<QTile>(b_tile, 0);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) add_product_by_column_chunks<T, D, QTile>(grad, a[kk], b_t_desc, kk);
  wgmma_commit();
}

// Dropout (warpgroup 0): register 4c + e of Pᵀ is (key key_local[e/2], query 8c + 2t + e%2); a
// dropped element goes into the exchange (exchanged) as −P, and P̃ = P·Z/(1 − p) stays in st for
// dV. keep_bits: the tile's keep flags [64 queries][2 words]; scale: 1/(1 − p).
__device__ __forceinline__ void drop_probabilities(float (&st)[32], float (&exchanged)[32], const uint32_t* keep_bits,
                                                   float scale, const int (&key_local)[2], int t) {
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int query = 8 * c + 2 * t + (e & 1), key = key_local[e / 2];
      const bool kept = (keep_bits[2 * query + key / 32] >> (key % 32)) & 1u;
      exchanged[4 * c + e] = kept ? st[4 * c + e] : -st[4 * c + e];
      st[4 * c + e] *= kept ? scale : 0.0f;
    }
}

// Pᵀ's exchange: registers 4c..4c+3 of thread i at float4 c·128 + i (consecutive threads,
// consecutive 16 bytes: no bank conflicts, 8 stores and 8 loads a thread). Both warpgroups' threads
// hold the same elements of a 64×64 accumulator, so thread i of one reads what thread i of the other
// wrote.
__device__ __forceinline__ void store_exchange(float4* exchange, const float (&exchanged)[32], int wg_thread) {
#pragma unroll
  for (int c = 0; c < 8; ++c)
    exchange[c * kWarpgroupThreads + wg_thread] =
        make_float4(exchanged[4 * c], exchanged[4 * c + 1], exchanged[4 * c + 2], exchanged[4 * c + 3]);
}

// dQ's panel `panel` = dS·K (A = dSᵀ [keys][queries] at sdS read M-major, B = K's panel read
// N-major), issued into dq [64 queries × 64 columns].
template <class T, class Plan>
__device__ __forceinline__ void issue_dq_panel(float (&dq)[32], uint32_t sdS, uint32_t sK, int panel) {
  using KVTile = typename Plan::KVTile;
  using DsTile = typename Plan::DsTile;
  const uint64_t ds_desc = opaque(mn_major_base<DsTile>(sdS, 0));
  const uint64_t k_t_desc = opaque(mn_major_base<KVTile>(sK, 64 * panel));
#pragma unroll
  for (int kk = 0; kk < Plan::kKeys / 16; ++kk)
    Wgmma<T, 64>::template ss<1, 1>(dq, advance(ds_desc, mn_major_step<DsTile>(kk)),
                                    advance(k_t_desc, mn_major_step<KVTile>(kk)), kk > 0);
}

// dq (panel `panel`) into two boxes of 32 columns, the warpgroup's boxes `first_box`, +1 of this
// tile, box b into slot b % kSlots at `slots`, each handed by the reducer to the copy engine, which
// adds it into dq_map's accumulator at (q0, head); a slot already used in this tile waits until the
// copy engine has read the box it held (the kSlots − 1 boxes since may still be pending). The
// caller has made the slots free at the start of the tile.
template <class Plan, int kSlots>
__device__ __forceinline__ void reduce_dq_panel(const float (&dq)[32], int panel, int first_box, uint32_t slots,
                                                int64_t q0, int64_t head, const CUtensorMap& dq_map, float scale,
                                                int warpgroup, int warp, int g, int t, bool reducer) {
  using DqBox = typename Plan::DqBox;
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
}

}  // namespace
}  // namespace flashbench::cuda
