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
#include "hopper/accumulators.cuh"
#include "hopper/backward_tile.cuh"
#include "hopper/barriers.cuh"
#include "hopper/dropout.cuh"
#include "hopper/epilogues.cuh"
#include "hopper/forward_mainloop.cuh"
#include "hopper/plans.cuh"
#include "hopper/query_walk.cuh"
#include "hopper/stage_ring.cuh"
#include "hopper/transposed_tiles.cuh"
#include "hopper/wide_backward_tile.cuh"
#include "tensor_map.hpp"

namespace flashbench::cuda {

namespace {

using namespace hopper;

// grid (ceil(N/Plan::kQueries), BH), Plan::kThreads threads; Q, O: [BH, N, kDim]; K, V: [BG, N_k, kDim]
// (q_map, k_map, v_map: their tensor maps, boxes of Plan::kQueries and Plan::kKeys rows); lse: [BH, N]
// (natural log, +∞ for a row that sees no key). The tiles are D wide: a head dim kDim < D arrives
// zero-padded (d = 96 in 128), which changes no product (S's k-steps stop at kDim). kDropout:
// O = P̃·V with the mask of `dropout`. Each warpgroup owns 64 query rows and walks the K/V tiles they
// see (ForwardMainloop).
template <class T, int D, int kDim, bool kDropout>
__global__ void __launch_bounds__(ForwardPlan<D, kDropout>::kThreads, 1)
    forward_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                   const __grid_constant__ CUtensorMap v_map, T* __restrict__ O, float* __restrict__ lse,
                   Extents extents, float scale_log2, philox::DropoutMask dropout) {
  using Mainloop = ForwardMainloop<T, D, kDim, kDropout>;
  int64_t row[2];  // this thread's query rows
  Mainloop mainloop(q_map, k_map, v_map, extents, scale_log2, dropout, row);
  mainloop.start();
  // The loop's state lives in arrays of the kernel, passed down by reference, declared in this order:
  // the order of the compiler's registers follows it, and ptxas's schedule follows that.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max [log2 units], partial sums
  typename Mainloop::Output o;                                // O [64 rows × D] of this warpgroup
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  typename Mainloop::Scores s;         // S_j, then its P_j in fp32
  typename Mainloop::Probabilities p;  // P in 16 bits, the A operand of O's product
  float alpha[2];                      // α of the last softmax
  mainloop.run(o, s, p, alpha, m, l);
  store_forward_rows<T, D, kDim, kDropout>(o, m, l, row, mainloop.seq,
                                           O + mainloop.offset, lse, mainloop.head, dropout, mainloop.t);
}

// grid (ceil(N_k/128) key blocks, BG), 256 threads: a block walks the query tiles of the r query
// heads that read its K/V head, so dK and dV sum over the group in registers. q_map, do_map: the
// tensor maps of Q, dO [BH, N, kDim] (boxes of kQueries rows); k_map, v_map of K, V [BG, N_k, kDim]
// (128). Adds dQ into the accumulator [BH, N, kDim] of dq_map (fp32 boxes of Plan::kDqBoxRows rows,
// zeroed by the caller); dK and dV [BG, N_k, kDim] go where key_gradients says (KeyGradientOut); lse
// (natural log) and row_dot [BH, N]. Tiles D wide, the head dim kDim ≤ D zero-padded as in the
// forward kernel. kDropout: the mask of `dropout` redrawn per tile, P̃ for dV
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
                    const float* __restrict__ row_dot, KeyGradientOut<T> key_gradients,
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

  const int64_t seq = extents.seq, seq_k = extents.seq_k;
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
  const int first_step = Plan::kDqParts == 1 ? 0 : 4 * warpgroup;  // of this warpgroup's dQ products
  const int query_row0 = Plan::kDqByQueryHalves ? 64 * warpgroup : 0;  // its first row of dQ in the tile
  constexpr int kDqAccumulators = DqProducts<Plan>::kAccumulators;
  // dQ's products and reduction (hopper/backward_tile.cuh) through two lambdas: the kernels that
  // defer dQ compile to other machine code when the loop calls the functions directly.
  auto issue_dq = [&](float (&dq)[kDqAccumulators], uint32_t sdS_dq) {
    issue_dq_products<T, Plan, D>(dq, sdS_dq, sK, warpgroup, first_step, query_row0);
  };
  auto reduce_dq = [&](const float (&dq)[kDqAccumulators], const QueryTile& query_tile) {
    reduce_dq_tile<Plan, D, kDim, kDropout>(dq, query_tile, dq_map, sDq, scale, warpgroup, warp, g, t, query_row0,
                                            reducer);
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

    // Sᵀ and dPᵀ as two commit groups: the exponentials of Pᵀ run while dPᵀ is on the tensor cores.
    float st[Plan::kQueries / 2], dpt[Plan::kQueries / 2];
    issue_scores_transposed<T, Plan, kDim>(st, dpt, sK, sV, sQi, sdOi, warpgroup);
    if constexpr (kDropout) {
      if (it + 1 < query_tiles) draw_tile_flags(next_tile(tile), buffer ^ 1);
    }
    wgmma_wait<1>();
    pin(st);

    probabilities_transposed<Plan::kKeys, Plan::kQueries>(st, lse_i, scale_log2, extents, q0, k0, key_local,
                                                         key_inside, t);
    wgmma_wait<0>();
    pin(dpt);
    if constexpr (kDropout)
      dropout_scores_gradient<Plan>(st, dpt, row_dot_i, keep_here + buffer * Plan::kQueries * Plan::kMaskLd,
                                    dropout.scale, key_local, warpgroup, t);
    uint32_t pa[Plan::kQueries / 16][4];
#pragma unroll
    for (int kk = 0; kk < Plan::kQueries / 16; ++kk) as_a_fragment<T>(pa[kk], st, kk);

    if constexpr (!kDropout) scores_gradient<Plan::kQueries>(st, dpt, row_dot_i, t);  // dSᵀ = Pᵀ ∘ (dPᵀ − D)
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
      if (it >= 2) named_barrier_sync<Plan::kThreads>(BackwardBarrier::kDsRead + 2 * other + buffer);
    }
    store_ds_tile<Plan>(dsa, sdSi, key_local, warpgroup, warp, lane, g, t);
    issue_key_gradients<T, Plan, D>(dk, dv, pa, dsa, sQi, sdOi);

    fence_proxy_async();
    // This warp is done with the stage (Q and dO by the products above, LSE and D before them) once
    // they completed; the last of the 8 refills it with the tile kStages further on.
    auto release_stage = [&] {
      uint32_t last = 0;
      if (lane == 0) last = ring.count_done();
      if (__shfl_sync(0xffffffffu, last, 0) && it + Plan::kStages < query_tiles) fetch(refill, stage);
    };
    if constexpr (Plan::kDqDeferred) {
      named_barrier_arrive<Plan::kThreads>(BackwardBarrier::kDsStored + 2 * warpgroup + buffer);
      // dQ of tile it − 1 (dS in the other buffer), once the other warpgroup's half is stored. The
      // sync counts every thread of this warpgroup, so the reducer's wait (its last dQ reduction
      // has read this warpgroup's part of the staging tile) comes before any of their stores. In
      // the first tile none is due, and the products run anyway, over K and V (read only here),
      // their result dropped: a product issued under a branch and waited for after it makes ptxas
      // serialize the products and spill (C7512, 1.1 KB).
      float dq[kDqAccumulators];
      const bool dq_due = it > 0;
      if (dq_due) {
        if (reducer) bulk_wait_read();
        named_barrier_sync<Plan::kThreads>(BackwardBarrier::kDsStored + 2 * other + (buffer ^ 1));
      }
      issue_dq(dq, dq_due ? sdS + (buffer ^ 1) * DsTile::kBytes : sK);
      wgmma_wait<0>();
      pin(dk);
      pin(dv);
      pin(dq);
      if (dq_due) {
        // The other warpgroup stores tile it + 1's dS in that buffer once this one's products read it.
        if (it + 1 < query_tiles) named_barrier_arrive<Plan::kThreads>(BackwardBarrier::kDsRead + 2 * warpgroup + (buffer ^ 1));
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
      named_barrier_sync<Plan::kThreads>(BackwardBarrier::kDsStored + 2 * other + last_buffer);
      float dq[kDqAccumulators];
      issue_dq(dq, sdS + last_buffer * DsTile::kBytes);
      wgmma_wait<0>();
      pin(dq);
      reduce_dq(dq, deferred_tile);
    }
  }
  if (reducer) bulk_wait();

  write_key_gradient<T, D, kDim>(dk, key_gradients.dk, key_gradients.dk_accumulator, scale, kv_head, seq_k, k0,
                                 key_local, key_inside, t);
  write_key_gradient<T, D, kDim>(dv, key_gradients.dv, key_gradients.dv_accumulator, 1.0f, kv_head, seq_k, k0,
                                 key_local, key_inside, t);
}


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
                         const float* __restrict__ row_dot, KeyGradientOut<T> key_gradients,
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
  // dQ's panels and their boxes (hopper/wide_backward_tile.cuh) through lambdas, as backward_kernel.
  auto dq_product = [&](float(&dq)[32], int panel) { issue_dq_panel<T, Plan>(dq, sdS, sK, panel); };
  auto reduce_dq = [&](const float(&dq)[32], int panel, int first_box, uint32_t slots, auto slot_count,
                       int64_t q0, int64_t head) {
    reduce_dq_panel<Plan, decltype(slot_count)::value>(dq, panel, first_box, slots, q0, head, dq_map, scale,
                                                        warpgroup, warp, g, t, reducer);
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
      float st[32];  // Sᵀ = K·Qᵀ [64 keys × 64 queries]
      issue_keys_by_queries<T, Plan, D>(st, sK, sQi);
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
      if constexpr (kDropout) drop_probabilities(st, exchanged, keep_bits, dropout.scale, key_local, t);

      // Pᵀ into the exchange. It is free: warpgroup 1 read the last tile's Pᵀ before dSᵀ was ready,
      // and the copy engine has read this warpgroup's dQ boxes staged there since.
      if (reducer) bulk_wait_read();
      warpgroup_barrier(0);
      store_exchange(exchange, exchanged, wg_thread);
      named_barrier_arrive<WideBackwardBarrier::kPReady, Plan::kThreads>();

      // dV += Pᵀ·dO, dO read MN-major.
      uint32_t pa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) as_a_fragment<T>(pa[kk], st, kk);
      add_keys_by_columns<T, Plan, D>(grad, pa, sdOi);

      // dQ's first panels once dSᵀ is ready, a panel at a time (32 registers, not 64: d = 256 spills).
      named_barrier_sync<WideBackwardBarrier::kDsReady, Plan::kThreads>();
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
          named_barrier_arrive<WideBackwardBarrier::kDsFree, Plan::kThreads>();  // the last product has read dSᵀ
        reduce_dq(dq, p, 2 * p, sExchange, std::integral_constant<int, Plan::kBoxSlots0>{}, q0, tile.head);
      }
    } else {
      float dpt[32];  // dPᵀ = V·dOᵀ [64 keys × 64 queries]
      issue_keys_by_queries<T, Plan, D>(dpt, sV, sdOi);
      wgmma_wait<0>();
      pin(dpt);

      // dSᵀ = Pᵀ ∘ (dPᵀ − D), Pᵀ from warpgroup 0 (0 where masked, so dSᵀ is too).
      named_barrier_sync<WideBackwardBarrier::kPReady, Plan::kThreads>();
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
      if (it > 0) named_barrier_sync<WideBackwardBarrier::kDsFree, Plan::kThreads>();
      store_transposed<DsTile>(generic_at(shared_raw, sdS), dsa, key_local, t);
      fence_proxy_async();
      named_barrier_arrive<WideBackwardBarrier::kDsReady, Plan::kThreads>();
      warpgroup_barrier(1);  // this warpgroup's own dQ products read all of dSᵀ

      // dK += dSᵀ·Q (Q read MN-major), then dQ's other panels, a panel at a time.
      add_keys_by_columns<T, Plan, D>(grad, dsa, sQi);
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

  // dV (warpgroup 0), or dK (warpgroup 1, scaled), of this block's keys.
  write_key_gradient<T, D, D>(grad, warpgroup == 0 ? key_gradients.dv : key_gradients.dk,
                              warpgroup == 0 ? key_gradients.dv_accumulator : key_gradients.dk_accumulator,
                              warpgroup == 0 ? 1.0f : scale, kv_head, seq_k, k0, key_local, key_inside, t);
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

// The kernels' KeyGradientOut: stored in T only where one block holds a K/V head's whole sum, which the
// caller asked for (flash_stores_key_gradients) and the grid confirms (not split over z).
template <class T>
KeyGradientOut<T> key_gradient_out(const LayerShape& shape, const KeyGradientTargets& targets, dim3 grid) {
  if (targets.dK == nullptr) return {targets.dk_accumulator, targets.dv_accumulator, nullptr, nullptr};
  if (grid.z != 1 || shape.group_size != 1)
    throw RuntimeFailure("internal error: dK and dV stored by a backward grid split over the group");
  return {nullptr, nullptr, static_cast<T*>(targets.dK), static_cast<T*>(targets.dV)};
}

template <class T, int D, int kDim, bool kDropout>
void backward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                    const float* lse, const float* row_dot, float* dq_accumulator,
                    const KeyGradientTargets& key_gradients, cudaStream_t stream) {
  using Plan = BackwardPlan<D, kDropout>;
  constexpr int kSharedBytes = Plan::kSharedBytes;
  check_cuda(cudaFuncSetAttribute(backward_kernel<T, D, kDim, kDropout>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kSharedBytes),
             "cudaFuncSetAttribute(backward_kernel)");
  const int64_t heads = shape.heads_total, kv_heads = shape.kv_heads_total();
  const dim3 grid = backward_grid(shape, Plan::kKeys);
  backward_kernel<T, D, kDim, kDropout><<<grid, Plan::kThreads, kSharedBytes, stream>>>(
      operand_map<T>(Q, kDim, shape.seq, heads, Plan::kQueries), operand_map<T>(K, kDim, shape.seq_k, kv_heads, Plan::kKeys),
      operand_map<T>(V, kDim, shape.seq_k, kv_heads, Plan::kKeys), operand_map<T>(dO, kDim, shape.seq, heads, Plan::kQueries),
      swizzled_tile_map(dq_accumulator, Dtype::fp32, kDim, shape.seq, heads, Plan::kDqBoxRows), lse, row_dot,
      key_gradient_out<T>(shape, key_gradients, grid), Extents::of(shape), shape.scale, shape.scale * kLog2e,
      shape.dropout);
  check_launch("backward_kernel (wgmma)");
}

// d = 192 and 256: the by-product split (wide_backward_kernel).
template <class T, int D, bool kDropout>
void wide_backward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                         const float* lse, const float* row_dot, float* dq_accumulator,
                         const KeyGradientTargets& key_gradients, cudaStream_t stream) {
  using Plan = WideBackwardPlan<D, kDropout>;
  check_cuda(cudaFuncSetAttribute(wide_backward_kernel<T, D, kDropout>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Plan::kSharedBytes),
             "cudaFuncSetAttribute(wide_backward_kernel)");
  const int64_t heads = shape.heads_total, kv_heads = shape.kv_heads_total();
  const dim3 grid = backward_grid(shape, Plan::kKeys);
  wide_backward_kernel<T, D, kDropout><<<grid, Plan::kThreads, Plan::kSharedBytes, stream>>>(
      operand_map<T>(Q, D, shape.seq, heads, Plan::kQueries), operand_map<T>(K, D, shape.seq_k, kv_heads, Plan::kKeys),
      operand_map<T>(V, D, shape.seq_k, kv_heads, Plan::kKeys), operand_map<T>(dO, D, shape.seq, heads, Plan::kQueries),
      swizzled_tile_map(dq_accumulator, Dtype::fp32, D, shape.seq, heads, Plan::kQueries), lse, row_dot,
      key_gradient_out<T>(shape, key_gradients, grid), Extents::of(shape), shape.scale, shape.scale * kLog2e,
      shape.dropout);
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
                       const float* lse, const float* row_dot, float* dq, const KeyGradientTargets& key_gradients,
                       cudaStream_t stream) {
    if constexpr (D > 128)
      wide_backward_typed<T, D, kDropout>(shape, Q, K, V, dO, lse, row_dot, dq, key_gradients, stream);
    else
      backward_typed<T, D, kDim, kDropout>(shape, Q, K, V, dO, lse, row_dot, dq, key_gradients, stream);
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
                          const float* lse, const float* row_dot, float* dq_accumulator,
                          const KeyGradientTargets& key_gradients, cudaStream_t stream) {
  by_layer(shape, [&](auto kernels) {
    kernels.backward(shape, Q, K, V, dO, lse, row_dot, dq_accumulator, key_gradients, stream);
  });
}

}  // namespace flashbench::cuda
