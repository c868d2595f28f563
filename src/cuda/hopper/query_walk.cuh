#pragma once
// The query tiles a backward block walks (backward_kernel, wide_backward_kernel): which tiles, in
// which order, and how one arrives in a stage of the block's ring. Included by flash_wgmma.cu alone:
// its names live in that file's anonymous namespace, as the kernels do.
#include <cstdint>

#include "../hopper.cuh"
#include "plans.cuh"

namespace flashbench::cuda {
namespace {

using namespace hopper;

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

}  // namespace
}  // namespace flashbench::cuda
