// v2 on the tensor cores for bf16/fp16: FlashAttention-2 forward and backward with warp-level
// mma.sync.m16n8k16 (fp32 accumulate). Tiles of 64 queries × 64 keys, 4 warps per block, each warp
// owning 16 rows of the tile. Tiles arrive in shared memory by cp.async (double-buffered), rows
// padded by 8 elements, and reach the tensor cores through ldmatrix; operands whose reduction axis
// is the tile's row axis (V in P·V, dO, Q and K in the backward) are transposed by ldmatrix.trans.
//
// Fragment layouts of m16n8k16 (PTX ISA), g = lane/4, t = lane%4:
//   A 16×16 (row):  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B 16×8  (col):  b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C 16×8:         c0,c1 (g, 2t, 2t+1)   c2,c3 (g+8, 2t, 2t+1)
// Two C tiles side by side (keys 16kk..16kk+15) are exactly one A fragment, which is how P and dS
// go from one product into the next without leaving registers.
//
// Every workload of kernels.hpp: query head h reads K/V head h / r; the backward runs over the BG
// K/V heads and walks the query tiles of all r query heads of a group, so dK and dV sum over the
// group in registers; the causal mask is bottom-right (query i sees keys j ≤ i + N_k − N), and a
// query that sees no key gets O = 0 and LSE = +∞. Dropout is a template parameter (the kernels
// without it carry none of its arithmetic) and redraws the Philox mask of element (h·N + i)·N_k + j.
#include <cstdint>

#include "flash_common.cuh"
#include "flash_internal.hpp"
#include "flash_layer.cuh"

namespace flashbench::cuda {

namespace {

template <int D>
struct FlashTile {
  static constexpr int kRows = 64;          // Br: queries per tile
  static constexpr int kCols = 64;          // Bc: keys per tile
  static constexpr int kThreads = 128;      // 4 warps × 16 rows
  static constexpr int kPad = 8;            // [elements] keeps rows 16-byte aligned; with it the 8 row
                                            // addresses of one ldmatrix fall into 8 different bank groups
  static constexpr int kLd = D + kPad;      // row-major tile [64][D]
  static constexpr int kTile = kRows * kLd; // elements of one [64][D] tile
  // Backward: 128 keys per block (8 warps × 16 keys) against query tiles of kRows, so each query
  // tile loaded and each dQ atomic serve twice as many keys as a 64-key block would.
  static constexpr int kBwdKeys = 128;
  static constexpr int kBwdThreads = 256;
  static constexpr int kLdS = kBwdKeys + kPad; // the dS tile [64 queries][128 keys]
};

template <class T>
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__half>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8×8 matrices of 16-bit values; lanes 8m..8m+7 give the row addresses of matrix m, and
// register m receives (row lane/4, columns 2·(lane%4), +1) of it, or with .trans (rows 2·(lane%4),
// +1, column lane/4).
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address)));
}

// A fragment: rows row0..row0+15, columns col0..col0+15 of a row-major tile with stride ld.
template <class T>
__device__ __forceinline__ void load_a(uint32_t a[4], const T* tile, int ld, int row0, int col0, int lane) {
  const int m = lane / 8, r = lane % 8;
  ldmatrix_x4(a, tile + (row0 + (m % 2) * 8 + r) * ld + col0 + (m / 2) * 8);
}

// B fragments of the two n-tiles n0 and n0+8 over k0..k0+15, from a tile stored [n][k] (k
// contiguous, e.g. K for S = Q·Kᵀ): b[0], b[1] for n0; b[2], b[3] for n0+8.
template <class T>
__device__ __forceinline__ void load_b_from_nk(uint32_t b[4], const T* tile, int ld, int n0, int k0, int lane) {
  const int m = lane / 8, r = lane % 8;
  ldmatrix_x4(b, tile + (n0 + (m / 2) * 8 + r) * ld + k0 + (m % 2) * 8);
}

// The same from a tile stored [k][n] (n contiguous, e.g. V for O = P·V), transposed by ldmatrix.
template <class T>
__device__ __forceinline__ void load_b_from_kn(uint32_t b[4], const T* tile, int ld, int k0, int n0, int lane) {
  const int m = lane / 8, r = lane % 8;
  ldmatrix_x4_trans(b, tile + (k0 + (m % 2) * 8 + r) * ld + n0 + (m / 2) * 8);
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Rows row0..row0+kRowCount-1 of a [N, D] head into a shared tile [kRowCount][kLd] by a block of
// kBlockThreads, 16-byte asynchronous copies; rows past N are zero-filled (source size 0).
template <class T, int D, int kRowCount = FlashTile<D>::kRows, int kBlockThreads = FlashTile<D>::kThreads>
__device__ void copy_tile_async(T* tile, const T* __restrict__ head, int64_t row0, int64_t seq) {
  using Tile = FlashTile<D>;
  constexpr int kChunksPerRow = D / 8;  // 8 elements = 16 bytes
  for (int c = threadIdx.x; c < kRowCount * kChunksPerRow; c += kBlockThreads) {
    const int r = c / kChunksPerRow, k = (c % kChunksPerRow) * 8;
    const bool inside = row0 + r < seq;
    const T* source = head + (inside ? (row0 + r) * D + k : 0);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(tile + r * Tile::kLd + k)),
                 "l"(source), "r"(inside ? 16 : 0));
  }
}

// Scores C fragments (8 tiles of 16×8 = 16 rows × 64 keys) as A fragments of the next product.
template <class T>
__device__ __forceinline__ void scores_as_a(uint32_t a[4], const float s[8][4], int kk) {
  a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
  a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
  a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// grid (ceil(N/64), BH); Q, O: [BH, N, D]; K, V: [BG, N_k, D]; lse: [BH, N] (natural log, +∞ for a
// row that sees no key). K and V tiles are double-buffered: the copy of tile j+1 runs while tile j is
// computed. kDropout: O = P̃·V with the mask of `dropout`, the normaliser l summing the undropped P.
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(128) flash_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K,
                                                            const T* __restrict__ V, T* __restrict__ O,
                                                            float* __restrict__ lse, LayerExtents extents,
                                                            float scale_log2, philox::DropoutMask dropout) {
  using Tile = FlashTile<D>;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* sQ = reinterpret_cast<T*>(shared_raw);
  T* sK = sQ + Tile::kTile;      // [2][64][kLd]
  T* sV = sK + 2 * Tile::kTile;  // [2][64][kLd]

  // Causal query tiles further down see more keys: launch those first so the short ones fill the tail.
  const int seq = extents.seq, seq_k = extents.seq_k, shift = seq_k - seq;
  const bool causal = extents.causal;
  const int64_t head = blockIdx.y;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * Tile::kRows;
  const int64_t offset = head * seq * D, kv_offset = head / extents.group_size * seq_k * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wr = warp * 16;
  const int row[2] = {q0 + wr + g, q0 + wr + g + 8};

  // The last key any row of the tile sees; none at all (a tile of rows above a bottom-right diagonal
  // that starts below them) leaves O = 0.
  const int last_key = causal ? min(q0 + Tile::kRows - 1 + shift, seq_k - 1) : seq_k - 1;
  const int key_tiles = last_key < 0 ? 0 : last_key / Tile::kCols + 1;
  copy_tile_async<T, D>(sQ, Q + offset, q0, seq);
  copy_tile_async<T, D>(sK, K + kv_offset, 0, seq_k);
  copy_tile_async<T, D>(sV, V + kv_offset, 0, seq_k);
  cp_async_commit();

  uint32_t qa[D / 16][4];
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max [log2 units] and sum
  for (int j = 0; j < key_tiles; ++j) {
    const int k0 = j * Tile::kCols;
    const T* sKj = sK + (j & 1) * Tile::kTile;
    const T* sVj = sV + (j & 1) * Tile::kTile;
    if (j + 1 < key_tiles) {
      copy_tile_async<T, D>(sK + ((j + 1) & 1) * Tile::kTile, K + kv_offset, k0 + Tile::kCols, seq_k);
      copy_tile_async<T, D>(sV + ((j + 1) & 1) * Tile::kTile, V + kv_offset, k0 + Tile::kCols, seq_k);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) load_a(qa[kk], sQ, Tile::kLd, wr, 16 * kk, lane);
    }

    float s[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        load_b_from_nk(b, sKj, Tile::kLd, 16 * np, 16 * kk, lane);
        mma_16816<T>(s[2 * np], qa[kk], b[0], b[1]);
        mma_16816<T>(s[2 * np + 1], qa[kk], b[2], b[3]);
      }

    // Scores in log2 units; masked ones (past N_k, or right of the diagonal) -INF. The test is
    // skipped on interior tiles, where every key exists and every row of the tile sees every key.
    const bool interior = k0 + Tile::kCols <= seq_k && (!causal || k0 + Tile::kCols - 1 <= q0 + shift);
    if (interior) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] *= scale_log2;
    } else {
      const int keys_left = seq_k - k0;
      // The last visible local key of each row (causal).
      const int diagonal[2] = {row[0] + shift - k0, row[1] + shift - k0};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int local_key = 8 * nt + 2 * t + (e & 1);
          const bool visible = local_key < keys_left && (!causal || local_key <= diagonal[e / 2]);
          s[nt][e] = visible ? s[nt][e] * scale_log2 : -INFINITY;
        }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
    float alpha[2], exp_offset[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float new_max = fmaxf(m[h], tile_max[h]);
      exp_offset[h] = new_max == -INFINITY ? 0.0f : new_max;  // a row with nothing visible yet stays at 0
      alpha[h] = exp2f(m[h] - exp_offset[h]);
      m[h] = new_max;
    }
    float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - exp_offset[e / 2]);
        tile_sum[e / 2] += s[nt][e];
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + tile_sum[h];
    // Dropout after the normaliser: l sums the undropped weights, O the dropped ones.
    if constexpr (kDropout) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint64_t element = uint64_t((head * seq + row[h]) * seq_k + k0 + 2 * t);  // of key k0 + 2t
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) drop_pair(dropout, element + 8 * nt, s[nt][2 * h], s[nt][2 * h + 1]);
      }
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      o[nd][0] *= alpha[0];
      o[nd][1] *= alpha[0];
      o[nd][2] *= alpha[1];
      o[nd][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < Tile::kCols / 16; ++kk) {
      uint32_t pa[4];
      scores_as_a<T>(pa, s, kk);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t b[4];
        load_b_from_kn(b, sVj, Tile::kLd, 16 * kk, 16 * np, lane);
        mma_16816<T>(o[2 * np], pa, b[0], b[1]);
        mma_16816<T>(o[2 * np + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads();  // this buffer is the target of the copy issued in the next iteration
  }
  cp_async_wait<0>();  // a tile that saw no key still issued its first copies

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (row[h] >= seq) continue;
    const float inverse = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;  // a row that sees no key: O = 0
    T* out = O + offset + int64_t(row[h]) * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd)
      *reinterpret_cast<uint32_t*>(out + 8 * nd + 2 * t) = pack2<T>(o[nd][2 * h] * inverse, o[nd][2 * h + 1] * inverse);
    if (t == 0) lse[head * seq + row[h]] = l[h] > 0.0f ? (m[h] + log2f(l[h])) * kLn2 : INFINITY;
  }
}

// grid (ceil(N_k/128) key blocks, BG), 8 warps. Each block owns 128 keys (16 per warp) of one K/V
// head and walks the query tiles of the r query heads that read it and can see those keys,
// accumulating dK and dV in registers (so they sum over the group); dQ of each query tile is summed
// over the block's keys in one more product (each warp: 16 queries × D/2 features) and added to
// `dq_accumulator` [BH, N, D] with fp32 atomics, dK and dV to `dk_accumulator` and `dv_accumulator`
// [BG, N_k, D] at the end (three distinct buffers zeroed by the caller). Query tiles (Q, dO, LSE, D) are
// double-buffered. kDropout: the mask of `dropout` redrawn per element, P̃ for dV and
// dP = dP̃ ∘ Z/(1 − p) for dS.
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(256, 1) flash_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K,
                                                             const T* __restrict__ V, const T* __restrict__ dO,
                                                             const float* __restrict__ lse,
                                                             const float* __restrict__ row_dot, float* dq_accumulator,
                                                             float* dk_accumulator, float* dv_accumulator,
                                                             LayerExtents extents,
                                                             float scale, float scale_log2,
                                                             philox::DropoutMask dropout) {
  using Tile = FlashTile<D>;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  constexpr int kKeyTile = Tile::kBwdKeys * Tile::kLd;  // elements of one [128][D] tile
  T* sK = reinterpret_cast<T*>(shared_raw);
  T* sV = sK + kKeyTile;
  T* sQ = sV + kKeyTile;           // [2][64][kLd]
  T* sdO = sQ + 2 * Tile::kTile;   // [2][64][kLd]
  T* sdS = sdO + 2 * Tile::kTile;  // [64 queries][kLdS], keys along the row
  float* sLse = reinterpret_cast<float*>(sdS + Tile::kRows * Tile::kLdS);  // [2][64], log2 units
  float* sRowDot = sLse + 2 * Tile::kRows;                                 // [2][64]

  const int seq = extents.seq, seq_k = extents.seq_k, shift = seq_k - seq;
  const bool causal = extents.causal;
  const int64_t kv_head = blockIdx.y;
  const int k0 = blockIdx.x * Tile::kBwdKeys;
  const int64_t kv_offset = kv_head * seq_k * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wk = warp * 16;  // this warp's keys within the block
  const int key_local[2] = {wk + g, wk + g + 8};
  const int keys_left = seq_k - k0;  // local key lk exists when lk < keys_left

  // Causal: queries i < k0 − shift see none of these keys. The block walks query tiles from
  // first_query to N in each of the group's r query heads in turn.
  const int first_query = causal ? max(k0 - shift, 0) : 0;
  const int query_tiles =
      first_query < seq ? (seq - first_query + Tile::kRows - 1) / Tile::kRows * extents.group_size : 0;
  auto fetch_query_tile = [&](int buffer, int64_t head, int q0) {
    const int64_t row_offset = head * seq;
    copy_tile_async<T, D, Tile::kRows, Tile::kBwdThreads>(sQ + buffer * Tile::kTile, Q + row_offset * D, q0, seq);
    copy_tile_async<T, D, Tile::kRows, Tile::kBwdThreads>(sdO + buffer * Tile::kTile, dO + row_offset * D, q0, seq);
    if (threadIdx.x < Tile::kRows) {
      const int query = q0 + threadIdx.x;
      sLse[buffer * Tile::kRows + threadIdx.x] = query < seq ? lse[row_offset + query] * kLog2e : 0.0f;
      sRowDot[buffer * Tile::kRows + threadIdx.x] = query < seq ? row_dot[row_offset + query] : 0.0f;
    }
  };
  copy_tile_async<T, D, Tile::kBwdKeys, Tile::kBwdThreads>(sK, K + kv_offset, k0, seq_k);
  copy_tile_async<T, D, Tile::kBwdKeys, Tile::kBwdThreads>(sV, V + kv_offset, k0, seq_k);
  int64_t head = kv_head * extents.group_size;  // the query head and first query of tile `it`
  int q0 = first_query;
  if (query_tiles > 0) fetch_query_tile(0, head, q0);
  cp_async_commit();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  for (int it = 0; it < query_tiles; ++it) {
    const int buffer = it & 1;
    const int64_t row_offset = head * seq;
    int next_q0 = q0 + Tile::kRows;  // the next tile, in this query head or at the start of the next
    int64_t next_head = head;
    if (next_q0 >= seq) {
      next_q0 = first_query;
      ++next_head;
    }
    const T* sQi = sQ + buffer * Tile::kTile;
    const T* sdOi = sdO + buffer * Tile::kTile;
    const float* sLsei = sLse + buffer * Tile::kRows;
    const float* sRowDoti = sRowDot + buffer * Tile::kRows;
    if (it + 1 < query_tiles) {
      fetch_query_tile(buffer ^ 1, next_head, next_q0);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for this warp's 16 keys × 64 queries.
    float pt[8][4] = {}, dpt[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      load_a(ka, sK, Tile::kLd, wk, 16 * kk, lane);
      load_a(va, sV, Tile::kLd, wk, 16 * kk, lane);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bq[4], bo[4];
        load_b_from_nk(bq, sQi, Tile::kLd, 16 * np, 16 * kk, lane);
        load_b_from_nk(bo, sdOi, Tile::kLd, 16 * np, 16 * kk, lane);
        mma_16816<T>(pt[2 * np], ka, bq[0], bq[1]);
        mma_16816<T>(pt[2 * np + 1], ka, bq[2], bq[3]);
        mma_16816<T>(dpt[2 * np], va, bo[0], bo[1]);
        mma_16816<T>(dpt[2 * np + 1], va, bo[2], bo[3]);
      }
    }
    // In the forward pass P_ij = exp(S_ij − LSE_i); here Pᵀ (0 where masked) and
    // dSᵀ = Pᵀ ∘ (dPᵀ − D) per element, D_i = rowsum(dO ∘ O) from the pre-pass over the whole row;
    // with dropout dP = dP̃ ∘ Z/(1 − p), and Pᵀ becomes P̃ᵀ for dV.
    // In 32-bit tile coordinates: query q0 + lq exists when lq < queries_left, and sees key
    // k0 + lk when lk <= lq + diagonal. Interior tiles (every query and key exists, every key is
    // seen by every query) skip the test.
    const int queries_left = min(seq - q0, Tile::kRows);
    const int diagonal = q0 + shift - k0;
    const bool interior =
        queries_left == Tile::kRows && keys_left >= Tile::kBwdKeys && (!causal || diagonal >= Tile::kBwdKeys - 1);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local_query = 8 * nt + 2 * t + (e & 1);
        const bool visible = interior || (local_query < queries_left && key_local[e / 2] < keys_left &&
                                          (!causal || key_local[e / 2] <= local_query + diagonal));
        pt[nt][e] = visible ? exp2f(pt[nt][e] * scale_log2 - sLsei[local_query]) : 0.0f;
        if constexpr (kDropout) {
          const float factor =
              dropout.factor(uint64_t((row_offset + q0 + local_query) * seq_k + k0 + key_local[e / 2]));
          dpt[nt][e] = pt[nt][e] * (dpt[nt][e] * factor - sRowDoti[local_query]);
          pt[nt][e] *= factor;
        } else {
          dpt[nt][e] = pt[nt][e] * (dpt[nt][e] - sRowDoti[local_query]);
        }
        sdS[local_query * Tile::kLdS + key_local[e / 2]] = from_float<T>(dpt[nt][e]);
      }
    // dV += P̃ᵀ dO and dK += dSᵀ Q (scale applied once at the end).
#pragma unroll
    for (int kk = 0; kk < Tile::kRows / 16; ++kk) {
      uint32_t pa[4], dsa[4];
      scores_as_a<T>(pa, pt, kk);
      scores_as_a<T>(dsa, dpt, kk);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t bo[4], bq[4];
        load_b_from_kn(bo, sdOi, Tile::kLd, 16 * kk, 16 * np, lane);
        load_b_from_kn(bq, sQi, Tile::kLd, 16 * kk, 16 * np, lane);
        mma_16816<T>(dv[2 * np], pa, bo[0], bo[1]);
        mma_16816<T>(dv[2 * np + 1], pa, bo[2], bo[3]);
        mma_16816<T>(dk[2 * np], dsa, bq[0], bq[1]);
        mma_16816<T>(dk[2 * np + 1], dsa, bq[2], bq[3]);
      }
    }
    __syncthreads();  // the whole dS tile is in shared memory

    // dQ = scale · dS K over the block's 128 keys; warp w takes queries 16·(w%4).. and features
    // (D/2)·(w/4)..
    constexpr int kHalf = D / 2;
    const int dq_row = 16 * (warp % 4), dq_feature = kHalf * (warp / 4);
    float dq[kHalf / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < Tile::kBwdKeys / 16; ++kk) {
      uint32_t dsa[4];
      load_a(dsa, sdS, Tile::kLdS, dq_row, 16 * kk, lane);
#pragma unroll
      for (int np = 0; np < kHalf / 16; ++np) {
        uint32_t bk[4];
        load_b_from_kn(bk, sK, Tile::kLd, 16 * kk, dq_feature + 16 * np, lane);
        mma_16816<T>(dq[2 * np], dsa, bk[0], bk[1]);
        mma_16816<T>(dq[2 * np + 1], dsa, bk[2], bk[3]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int local_query = dq_row + g + 8 * h;
      if (local_query >= queries_left) continue;
      float* out = dq_accumulator + (row_offset + q0 + local_query) * D + dq_feature;
#pragma unroll
      for (int nd = 0; nd < kHalf / 8; ++nd) {
        atomicAdd(out + 8 * nd + 2 * t, scale * dq[nd][2 * h]);
        atomicAdd(out + 8 * nd + 2 * t + 1, scale * dq[nd][2 * h + 1]);
      }
    }
    __syncthreads();  // dS and this query buffer are rewritten in the next iterations
    head = next_head;
    q0 = next_q0;
  }
  cp_async_wait<0>();  // a block no query sees still issued its first copies

  // dK (scaled) and dV of this block's keys, each into its own accumulator. This block is the only
  // one writing these rows (it walked every query head of the group), so adding into the zeroed
  // buffers is storing; the adds (red.global) keep the d = 128 dropout kernel within its 255
  // registers on sm_80, where plain stores, scalar or paired, spilled 12 bytes.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (key_local[h] >= keys_left) continue;
    const int64_t row = kv_offset + int64_t(k0 + key_local[h]) * D;
    float* dk_out = dk_accumulator + row;
    float* dv_out = dv_accumulator + row;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      atomicAdd(dk_out + 8 * nd + 2 * t, scale * dk[nd][2 * h]);
      atomicAdd(dk_out + 8 * nd + 2 * t + 1, scale * dk[nd][2 * h + 1]);
      atomicAdd(dv_out + 8 * nd + 2 * t, dv[nd][2 * h]);
      atomicAdd(dv_out + 8 * nd + 2 * t + 1, dv[nd][2 * h + 1]);
    }
  }
}

template <class T, int D>
size_t forward_shared_bytes() {
  using Tile = FlashTile<D>;
  return sizeof(T) * size_t(5 * Tile::kTile);  // Q, and two buffers of K and of V
}

template <class T, int D>
size_t backward_shared_bytes() {
  using Tile = FlashTile<D>;
  // K and V [128][kLd], two buffers of Q and of dO [64][kLd], the dS tile; two buffers of LSE and D.
  return sizeof(T) * size_t(2 * Tile::kBwdKeys * Tile::kLd + 4 * Tile::kTile + Tile::kRows * Tile::kLdS) +
         sizeof(float) * 4 * Tile::kRows;
}

template <class T, int D, bool kDropout>
void forward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                   cudaStream_t stream) {
  const size_t shared = forward_shared_bytes<T, D>();
  check_cuda(cudaFuncSetAttribute(flash_forward_kernel<T, D, kDropout>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(shared)),
             "cudaFuncSetAttribute(flash_forward_kernel)");
  flash_forward_kernel<T, D, kDropout><<<tile_grid(shape, FlashTile<D>::kRows), FlashTile<D>::kThreads, shared,
                                         stream>>>(
      static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<T*>(O), lse,
      LayerExtents::of(shape), shape.scale * kLog2e, shape.dropout);
  check_launch("flash_forward_kernel");
}

template <class T, int D, bool kDropout>
void backward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                    const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                    float* dv_accumulator, cudaStream_t stream) {
  using Tile = FlashTile<D>;
  const size_t shared = backward_shared_bytes<T, D>();
  check_cuda(cudaFuncSetAttribute(flash_backward_kernel<T, D, kDropout>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(shared)),
             "cudaFuncSetAttribute(flash_backward_kernel)");
  // Key blocks along x, one row of them per K/V head.
  if (shape.kv_heads_total() > 65535) throw RuntimeFailure("v2 on CUDA supports at most 65535 K/V heads (B·G)");
  const dim3 grid(static_cast<unsigned>((shape.seq_k + Tile::kBwdKeys - 1) / Tile::kBwdKeys),
                  static_cast<unsigned>(shape.kv_heads_total()));
  flash_backward_kernel<T, D, kDropout><<<grid, Tile::kBwdThreads, shared, stream>>>(
      static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<const T*>(dO), lse,
      row_dot, dq_accumulator, dk_accumulator, dv_accumulator, LayerExtents::of(shape), shape.scale, shape.scale * kLog2e,
      shape.dropout);
  check_launch("flash_backward_kernel");
}

}  // namespace

// The instance of the layer's storage type, head dim (64 or 128) and dropout.
void flash_forward_mma(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                       cudaStream_t stream) {
  dispatch_16bit(shape.dtype, [&](auto element) {
    dispatch_dropout(shape.dropout.active(), [&](auto dropout) {
      using T = decltype(element);
      if (shape.head_dim == 64) return forward_typed<T, 64, dropout()>(shape, Q, K, V, O, lse, stream);
      forward_typed<T, 128, dropout()>(shape, Q, K, V, O, lse, stream);
    });
  });
}

void flash_backward_mma(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                        const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                        float* dv_accumulator, cudaStream_t stream) {
  dispatch_16bit(shape.dtype, [&](auto element) {
    dispatch_dropout(shape.dropout.active(), [&](auto dropout) {
      using T = decltype(element);
      if (shape.head_dim == 64)
        return backward_typed<T, 64, dropout()>(shape, Q, K, V, dO, lse, row_dot, dq_accumulator, dk_accumulator,
                                                dv_accumulator, stream);
      backward_typed<T, 128, dropout()>(shape, Q, K, V, dO, lse, row_dot, dq_accumulator, dk_accumulator,
                                        dv_accumulator, stream);
    });
  });
}

}  // namespace flashbench::cuda
