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
#include <cstdint>

#include "flash_common.cuh"
#include "flash_internal.hpp"

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

// grid (ceil(N/64), BH); Q, K, V, O: [BH, N, D]; lse: [BH, N] (natural log). K and V tiles are
// double-buffered: the copy of tile j+1 runs while tile j is computed.
template <class T, int D>
__global__ void __launch_bounds__(128) flash_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K,
                                                            const T* __restrict__ V, T* __restrict__ O,
                                                            float* __restrict__ lse, int64_t seq, bool causal,
                                                            float scale_log2) {
  using Tile = FlashTile<D>;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* sQ = reinterpret_cast<T*>(shared_raw);
  T* sK = sQ + Tile::kTile;      // [2][64][kLd]
  T* sV = sK + 2 * Tile::kTile;  // [2][64][kLd]

  // Causal query tiles further down see more keys: launch those first so the short ones fill the tail.
  const int64_t head = blockIdx.y, q0 = int64_t(gridDim.x - 1 - blockIdx.x) * Tile::kRows;
  const int64_t offset = head * seq * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wr = warp * 16;
  const int64_t row[2] = {q0 + wr + g, q0 + wr + g + 8};

  const int64_t last_key = causal ? min(q0 + Tile::kRows - 1, seq - 1) : seq - 1;
  const int key_tiles = int(last_key / Tile::kCols) + 1;
  copy_tile_async<T, D>(sQ, Q + offset, q0, seq);
  copy_tile_async<T, D>(sK, K + offset, 0, seq);
  copy_tile_async<T, D>(sV, V + offset, 0, seq);
  cp_async_commit();

  uint32_t qa[D / 16][4];
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max [log2 units] and sum
  for (int j = 0; j < key_tiles; ++j) {
    const int64_t k0 = int64_t(j) * Tile::kCols;
    const T* sKj = sK + (j & 1) * Tile::kTile;
    const T* sVj = sV + (j & 1) * Tile::kTile;
    if (j + 1 < key_tiles) {
      copy_tile_async<T, D>(sK + ((j + 1) & 1) * Tile::kTile, K + offset, k0 + Tile::kCols, seq);
      copy_tile_async<T, D>(sV + ((j + 1) & 1) * Tile::kTile, V + offset, k0 + Tile::kCols, seq);
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

    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = k0 + 8 * nt + 2 * t + (e & 1);
        const bool visible = key < seq && (!causal || key <= row[e / 2]);
        s[nt][e] = visible ? s[nt][e] * scale_log2 : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
      }
    float alpha[2], shift[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float new_max = fmaxf(m[h], tile_max[h]);
      shift[h] = new_max == -INFINITY ? 0.0f : new_max;  // a row with nothing visible yet stays at 0
      alpha[h] = exp2f(m[h] - shift[h]);
      m[h] = new_max;
    }
    float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - shift[e / 2]);
        tile_sum[e / 2] += s[nt][e];
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + tile_sum[h];
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

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (row[h] >= seq) continue;
    const float inverse = 1.0f / l[h];
    T* out = O + offset + row[h] * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd)
      *reinterpret_cast<uint32_t*>(out + 8 * nd + 2 * t) = pack2<T>(o[nd][2 * h] * inverse, o[nd][2 * h + 1] * inverse);
    if (t == 0) lse[head * seq + row[h]] = (m[h] + log2f(l[h])) * kLn2;
  }
}

// grid (ceil(N/128) key blocks, BH), 8 warps. Each block owns 128 keys (16 per warp) and walks over
// the query tiles that can see them, accumulating dK and dV in registers; dQ of each query tile is
// summed over the block's keys in one more product (each warp: 16 queries × D/2 features) and added
// to `accumulator` with fp32 atomics. Query tiles (Q, dO, LSE, D) are double-buffered.
template <class T, int D>
__global__ void __launch_bounds__(256, 1) flash_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K,
                                                             const T* __restrict__ V, const T* __restrict__ dO,
                                                             const float* __restrict__ lse,
                                                             const float* __restrict__ row_dot,
                                                             float* __restrict__ accumulator, int64_t seq,
                                                             bool causal, float scale, float scale_log2) {
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

  const int64_t head = blockIdx.y, k0 = int64_t(blockIdx.x) * Tile::kBwdKeys;
  const int64_t offset = head * seq * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wk = warp * 16;  // this warp's keys within the block
  const int64_t key[2] = {k0 + wk + g, k0 + wk + g + 8};

  // Causal: queries before k0 see none of these keys.
  const int64_t first_query = causal ? k0 : 0;
  const int query_tiles = int((seq - first_query + Tile::kRows - 1) / Tile::kRows);
  auto fetch_query_tile = [&](int it) {
    const int buffer = it & 1;
    const int64_t q0 = first_query + int64_t(it) * Tile::kRows;
    copy_tile_async<T, D, Tile::kRows, Tile::kBwdThreads>(sQ + buffer * Tile::kTile, Q + offset, q0, seq);
    copy_tile_async<T, D, Tile::kRows, Tile::kBwdThreads>(sdO + buffer * Tile::kTile, dO + offset, q0, seq);
    if (threadIdx.x < Tile::kRows) {
      const int64_t query = q0 + threadIdx.x;
      sLse[buffer * Tile::kRows + threadIdx.x] = query < seq ? lse[head * seq + query] * kLog2e : 0.0f;
      sRowDot[buffer * Tile::kRows + threadIdx.x] = query < seq ? row_dot[head * seq + query] : 0.0f;
    }
  };
  copy_tile_async<T, D, Tile::kBwdKeys, Tile::kBwdThreads>(sK, K + offset, k0, seq);
  copy_tile_async<T, D, Tile::kBwdKeys, Tile::kBwdThreads>(sV, V + offset, k0, seq);
  fetch_query_tile(0);
  cp_async_commit();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  for (int it = 0; it < query_tiles; ++it) {
    const int buffer = it & 1;
    const int64_t q0 = first_query + int64_t(it) * Tile::kRows;
    const T* sQi = sQ + buffer * Tile::kTile;
    const T* sdOi = sdO + buffer * Tile::kTile;
    const float* sLsei = sLse + buffer * Tile::kRows;
    const float* sRowDoti = sRowDot + buffer * Tile::kRows;
    if (it + 1 < query_tiles) {
      fetch_query_tile(it + 1);
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
    // In the forward pass P_ij = exp(S_ij − LSE_i); here Pᵀ and dSᵀ = Pᵀ ∘ (dPᵀ − D) per element,
    // D_i = rowsum(dO ∘ O) from the pre-pass over the whole row.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local_query = 8 * nt + 2 * t + (e & 1);
        const int64_t query = q0 + local_query;
        const bool visible = query < seq && key[e / 2] < seq && (!causal || key[e / 2] <= query);
        pt[nt][e] = visible ? exp2f(pt[nt][e] * scale_log2 - sLsei[local_query]) : 0.0f;
        dpt[nt][e] = pt[nt][e] * (dpt[nt][e] - sRowDoti[local_query]);
        sdS[local_query * Tile::kLdS + wk + g + (e / 2) * 8] = from_float<T>(dpt[nt][e]);
      }
    // dV += Pᵀ dO and dK += dSᵀ Q (scale applied once at the end).
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
      const int64_t query = q0 + dq_row + g + 8 * h;
      if (query >= seq) continue;
      float* out = accumulator + (head * seq + query) * D + dq_feature;
#pragma unroll
      for (int nd = 0; nd < kHalf / 8; ++nd) {
        atomicAdd(out + 8 * nd + 2 * t, scale * dq[nd][2 * h]);
        atomicAdd(out + 8 * nd + 2 * t + 1, scale * dq[nd][2 * h + 1]);
      }
    }
    __syncthreads();  // dS and this query buffer are rewritten in the next iterations
  }

  // dX rows of this block's keys get dK + dV (other blocks may be adding dQ to the same rows).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (key[h] >= seq) continue;
    float* out = accumulator + (head * seq + key[h]) * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      atomicAdd(out + 8 * nd + 2 * t, scale * dk[nd][2 * h] + dv[nd][2 * h]);
      atomicAdd(out + 8 * nd + 2 * t + 1, scale * dk[nd][2 * h + 1] + dv[nd][2 * h + 1]);
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

template <class T, int D>
void forward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                   cudaStream_t stream) {
  const size_t shared = forward_shared_bytes<T, D>();
  check_cuda(cudaFuncSetAttribute(flash_forward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)),
             "cudaFuncSetAttribute(flash_forward_kernel)");
  flash_forward_kernel<T, D><<<tile_grid(shape, FlashTile<D>::kRows), FlashTile<D>::kThreads, shared, stream>>>(
      static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<T*>(O), lse,
      shape.seq, shape.causal, shape.scale * kLog2e);
  check_launch("flash_forward_kernel");
}

template <class T, int D>
void backward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                    const float* lse, const float* row_dot, float* accumulator, cudaStream_t stream) {
  const size_t shared = backward_shared_bytes<T, D>();
  check_cuda(cudaFuncSetAttribute(flash_backward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)),
             "cudaFuncSetAttribute(flash_backward_kernel)");
  flash_backward_kernel<T, D><<<tile_grid(shape, FlashTile<D>::kBwdKeys), FlashTile<D>::kBwdThreads, shared,
                                 stream>>>(
      static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<const T*>(dO), lse,
      row_dot, accumulator, shape.seq, shape.causal, shape.scale, shape.scale * kLog2e);
  check_launch("flash_backward_kernel");
}

template <class T>
void forward_by_dim(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                    cudaStream_t stream) {
  if (shape.head_dim == 64) return forward_typed<T, 64>(shape, Q, K, V, O, lse, stream);
  return forward_typed<T, 128>(shape, Q, K, V, O, lse, stream);
}

template <class T>
void backward_by_dim(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                     const float* lse, const float* row_dot, float* accumulator, cudaStream_t stream) {
  if (shape.head_dim == 64) return backward_typed<T, 64>(shape, Q, K, V, dO, lse, row_dot, accumulator, stream);
  return backward_typed<T, 128>(shape, Q, K, V, dO, lse, row_dot, accumulator, stream);
}

}  // namespace

void flash_forward_mma(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                       cudaStream_t stream) {
  if (shape.dtype == Dtype::bf16) return forward_by_dim<__nv_bfloat16>(shape, Q, K, V, O, lse, stream);
  return forward_by_dim<__half>(shape, Q, K, V, O, lse, stream);
}

void flash_backward_mma(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                        const float* lse, const float* row_dot, float* accumulator, cudaStream_t stream) {
  if (shape.dtype == Dtype::bf16)
    return backward_by_dim<__nv_bfloat16>(shape, Q, K, V, dO, lse, row_dot, accumulator, stream);
  return backward_by_dim<__half>(shape, Q, K, V, dO, lse, row_dot, accumulator, stream);
}

}  // namespace flashbench::cuda
