// v2 on the tensor cores for bf16/fp16: FlashAttention-2 forward and backward with warp-level
// mma.sync.m16n8k16 (fp32 accumulate). Tiles of 64 queries × 64 keys, 4 warps per block, each warp
// owning 16 rows of the tile. Tiles go through shared memory with 8 elements of padding per row;
// operands whose reduction axis is not contiguous in global memory are stored transposed in shared
// memory so that every fragment is a pair of adjacent 16-bit values.
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
  static constexpr int kPad = 8;            // [elements] keeps rows 16-byte aligned, shifts banks
  static constexpr int kLd = D + kPad;      // row-major tile [64][D]
  static constexpr int kLdT = kCols + kPad; // transposed tile [D][64] and the dS tile [64][64]
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

// Two floats as one register of two 16-bit values, the first in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <class T>
__device__ __forceinline__ uint32_t load_pair(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// A fragment rows row0..row0+15, columns col0..col0+15 of a row-major shared tile with stride ld.
template <class T>
__device__ __forceinline__ void load_a(uint32_t a[4], const T* tile, int ld, int row0, int col0, int g, int t) {
  a[0] = load_pair(tile + (row0 + g) * ld + col0 + 2 * t);
  a[1] = load_pair(tile + (row0 + g + 8) * ld + col0 + 2 * t);
  a[2] = load_pair(tile + (row0 + g) * ld + col0 + 2 * t + 8);
  a[3] = load_pair(tile + (row0 + g + 8) * ld + col0 + 2 * t + 8);
}

// Rows row0..row0+63 of a [N, D] head into a shared tile [64][ld] (zeros past N), and optionally
// transposed into [D][ldT]. 16-byte global loads.
template <class T, int D>
__device__ void load_tile(const T* __restrict__ head, int64_t row0, int64_t seq, T* tile, T* tile_transposed) {
  using Tile = FlashTile<D>;
  constexpr int kChunksPerRow = D / 8;  // 8 elements = 16 bytes
  for (int c = threadIdx.x; c < Tile::kRows * kChunksPerRow; c += Tile::kThreads) {
    const int r = c / kChunksPerRow, k = (c % kChunksPerRow) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row0 + r < seq) value = *reinterpret_cast<const uint4*>(head + (row0 + r) * D + k);
    if (tile) *reinterpret_cast<uint4*>(tile + r * Tile::kLd + k) = value;
    if (tile_transposed) {
      const T* elements = reinterpret_cast<const T*>(&value);
#pragma unroll
      for (int e = 0; e < 8; ++e) tile_transposed[(k + e) * Tile::kLdT + r] = elements[e];
    }
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

// grid (ceil(N/64), BH); Q, K, V, O: [BH, N, D]; lse: [BH, N] (natural log).
template <class T, int D>
__global__ void __launch_bounds__(128) flash_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K,
                                                            const T* __restrict__ V, T* __restrict__ O,
                                                            float* __restrict__ lse, int64_t seq, bool causal,
                                                            float scale_log2) {
  using Tile = FlashTile<D>;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* sQ = reinterpret_cast<T*>(shared_raw);
  T* sK = sQ + Tile::kRows * Tile::kLd;
  T* sVt = sK + Tile::kCols * Tile::kLd;

  const int64_t head = blockIdx.y, q0 = int64_t(blockIdx.x) * Tile::kRows;
  const int64_t offset = head * seq * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wr = warp * 16;
  const int64_t row[2] = {q0 + wr + g, q0 + wr + g + 8};

  load_tile<T, D>(Q + offset, q0, seq, sQ, nullptr);
  __syncthreads();
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) load_a(qa[kk], sQ, Tile::kLd, wr, 16 * kk, g, t);

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max [log2 units] and sum
  const int64_t last_key = causal ? min(q0 + Tile::kRows - 1, seq - 1) : seq - 1;
  for (int64_t k0 = 0; k0 <= last_key; k0 += Tile::kCols) {
    __syncthreads();  // everyone is done with the previous K and V tiles
    load_tile<T, D>(K + offset, k0, seq, sK, nullptr);
    load_tile<T, D>(V + offset, k0, seq, nullptr, sVt);
    __syncthreads();

    float s[8][4] = {};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const T* b = sK + (8 * nt + g) * Tile::kLd + 16 * kk + 2 * t;
        mma_16816<T>(s[nt], qa[kk], load_pair(b), load_pair(b + 8));
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
      for (int nd = 0; nd < D / 8; ++nd) {
        const T* b = sVt + (8 * nd + g) * Tile::kLdT + 16 * kk + 2 * t;
        mma_16816<T>(o[nd], pa, load_pair(b), load_pair(b + 8));
      }
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
    const float inverse = 1.0f / l[h];
    T* out = O + offset + row[h] * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd)
      *reinterpret_cast<uint32_t*>(out + 8 * nd + 2 * t) = pack2<T>(o[nd][2 * h] * inverse, o[nd][2 * h + 1] * inverse);
    if (t == 0) lse[head * seq + row[h]] = (m[h] + log2f(l[h])) * kLn2;
  }
}

// grid (ceil(N/64) key blocks, BH). Each block owns 64 keys (16 per warp) and walks over the query
// tiles that can see them, accumulating dK and dV in registers; dQ of each query tile is summed
// over the block's keys in one more product and added to `accumulator` with fp32 atomics.
template <class T, int D>
__global__ void __launch_bounds__(128) flash_backward_kernel(const T* __restrict__ Q, const T* __restrict__ K,
                                                             const T* __restrict__ V, const T* __restrict__ dO,
                                                             const float* __restrict__ lse,
                                                             const float* __restrict__ row_dot,
                                                             float* __restrict__ accumulator, int64_t seq,
                                                             bool causal, float scale, float scale_log2) {
  using Tile = FlashTile<D>;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* sK = reinterpret_cast<T*>(shared_raw);
  T* sV = sK + Tile::kCols * Tile::kLd;
  T* sQ = sV + Tile::kCols * Tile::kLd;
  T* sdO = sQ + Tile::kRows * Tile::kLd;
  T* sKt = sdO + Tile::kRows * Tile::kLd;
  T* sQt = sKt + D * Tile::kLdT;
  T* sdOt = sQt + D * Tile::kLdT;
  T* sdS = sdOt + D * Tile::kLdT;  // [64 queries][64 keys]
  float* sLse = reinterpret_cast<float*>(sdS + Tile::kRows * Tile::kLdT);  // [log2 units]
  float* sRowDot = sLse + Tile::kRows;

  const int64_t head = blockIdx.y, k0 = int64_t(blockIdx.x) * Tile::kCols;
  const int64_t offset = head * seq * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wk = warp * 16;  // this warp's keys within the block
  const int64_t key[2] = {k0 + wk + g, k0 + wk + g + 8};

  load_tile<T, D>(K + offset, k0, seq, sK, sKt);
  load_tile<T, D>(V + offset, k0, seq, sV, nullptr);

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int64_t first_query = causal ? k0 : 0;  // causal: queries before k0 see none of these keys
  for (int64_t q0 = first_query; q0 < seq; q0 += Tile::kRows) {
    __syncthreads();  // everyone is done with the previous query tile and dS
    load_tile<T, D>(Q + offset, q0, seq, sQ, sQt);
    load_tile<T, D>(dO + offset, q0, seq, sdO, sdOt);
    if (threadIdx.x < Tile::kRows) {
      const int64_t query = q0 + threadIdx.x;
      sLse[threadIdx.x] = query < seq ? lse[head * seq + query] * kLog2e : 0.0f;
      sRowDot[threadIdx.x] = query < seq ? row_dot[head * seq + query] : 0.0f;
    }
    __syncthreads();

    // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for this warp's 16 keys × 64 queries.
    float pt[8][4] = {}, dpt[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      load_a(ka, sK, Tile::kLd, wk, 16 * kk, g, t);
      load_a(va, sV, Tile::kLd, wk, 16 * kk, g, t);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const T* bq = sQ + (8 * nt + g) * Tile::kLd + 16 * kk + 2 * t;
        const T* bo = sdO + (8 * nt + g) * Tile::kLd + 16 * kk + 2 * t;
        mma_16816<T>(pt[nt], ka, load_pair(bq), load_pair(bq + 8));
        mma_16816<T>(dpt[nt], va, load_pair(bo), load_pair(bo + 8));
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
        pt[nt][e] = visible ? exp2f(pt[nt][e] * scale_log2 - sLse[local_query]) : 0.0f;
        dpt[nt][e] = pt[nt][e] * (dpt[nt][e] - sRowDot[local_query]);
        sdS[local_query * Tile::kLdT + wk + g + (e / 2) * 8] = from_float<T>(dpt[nt][e]);
      }
    // dV += Pᵀ dO and dK += dSᵀ Q (scale applied once at the end).
#pragma unroll
    for (int kk = 0; kk < Tile::kRows / 16; ++kk) {
      uint32_t pa[4], dsa[4];
      scores_as_a<T>(pa, pt, kk);
      scores_as_a<T>(dsa, dpt, kk);
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        const T* bo = sdOt + (8 * nd + g) * Tile::kLdT + 16 * kk + 2 * t;
        const T* bq = sQt + (8 * nd + g) * Tile::kLdT + 16 * kk + 2 * t;
        mma_16816<T>(dv[nd], pa, load_pair(bo), load_pair(bo + 8));
        mma_16816<T>(dk[nd], dsa, load_pair(bq), load_pair(bq + 8));
      }
    }
    __syncthreads();  // the whole dS tile is in shared memory

    // dQ = scale · dS K for this warp's 16 queries, over the block's 64 keys.
    float dq[D / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < Tile::kCols / 16; ++kk) {
      uint32_t dsa[4];
      load_a(dsa, sdS, Tile::kLdT, warp * 16, 16 * kk, g, t);
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        const T* bk = sKt + (8 * nd + g) * Tile::kLdT + 16 * kk + 2 * t;
        mma_16816<T>(dq[nd], dsa, load_pair(bk), load_pair(bk + 8));
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t query = q0 + warp * 16 + g + 8 * h;
      if (query >= seq) continue;
      float* out = accumulator + (head * seq + query) * D;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        atomicAdd(out + 8 * nd + 2 * t, scale * dq[nd][2 * h]);
        atomicAdd(out + 8 * nd + 2 * t + 1, scale * dq[nd][2 * h + 1]);
      }
    }
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
  return sizeof(T) * size_t(Tile::kRows * Tile::kLd + Tile::kCols * Tile::kLd + D * Tile::kLdT);
}

template <class T, int D>
size_t backward_shared_bytes() {
  using Tile = FlashTile<D>;
  return sizeof(T) * size_t(2 * Tile::kCols * Tile::kLd + 2 * Tile::kRows * Tile::kLd + 3 * D * Tile::kLdT +
                            Tile::kRows * Tile::kLdT) +
         sizeof(float) * 2 * Tile::kRows;
}

dim3 tile_grid(const LayerShape& shape) {
  if (shape.heads_total > 65535) throw RuntimeFailure("v2 on CUDA supports at most 65535 heads (B·H)");
  return dim3(static_cast<unsigned>((shape.seq + 63) / 64), static_cast<unsigned>(shape.heads_total));
}

template <class T, int D>
void forward_typed(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                   cudaStream_t stream) {
  const size_t shared = forward_shared_bytes<T, D>();
  check_cuda(cudaFuncSetAttribute(flash_forward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)),
             "cudaFuncSetAttribute(flash_forward_kernel)");
  flash_forward_kernel<T, D><<<tile_grid(shape), FlashTile<D>::kThreads, shared, stream>>>(
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
  flash_backward_kernel<T, D><<<tile_grid(shape), FlashTile<D>::kThreads, shared, stream>>>(
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
