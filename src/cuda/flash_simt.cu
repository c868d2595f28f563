// v2 for fp32 without tensor cores: the same algorithm as flash_mma.cu (online softmax forward
// keeping LSE; backward recomputing P per tile from LSE and D = rowsum(dO ∘ O)), four threads per
// query row (forward, dQ) or per key row (dK, dV), each holding every fourth column (at d = 128 a
// thread's row vectors take 32-128 registers instead of 128-512, which spilled), tiles of 32 rows
// in shared memory.
// Nothing N×N is stored; dQ and dK, dV run as two kernels so that no atomics are needed.
//
// Every workload of kernels.hpp: query head h reads K/V head h / r; the dK/dV kernel runs over the
// BG K/V heads and walks the query rows of all r query heads of its group, so dK and dV sum over the
// group in registers; the causal mask is bottom-right (query i sees keys j ≤ i + N_k − N), and a
// query that sees no key gets O = 0 and LSE = +∞. Dropout (a template parameter, so the kernels
// without it carry none of its arithmetic) redraws the Philox mask of element (h·N + i)·N_k + j.
#include "flash_common.cuh"
#include "flash_internal.hpp"
#include "flash_layer.cuh"

namespace flashbench::cuda {

namespace {

constexpr int kRowsPerBlock = 64;  // rows of a block
constexpr int kLanesPerRow = 4;    // consecutive lanes sharing a row, lane `part` holding its columns
                                   // part, part + 4, ... (the four read consecutive words of a tile row)
constexpr int kThreads = kRowsPerBlock * kLanesPerRow;
constexpr int kTileRows = 32;      // rows of the streamed operand per shared-memory tile

template <int D>
__device__ void load_rows(float (*tile)[D], const float* __restrict__ head, int64_t row0, int64_t seq) {
  for (int c = threadIdx.x; c < kTileRows * D; c += kThreads) {
    const int r = c / D, k = c % D;
    tile[r][k] = row0 + r < seq ? head[(row0 + r) * D + k] : 0.0f;
  }
}

// The row's part of this thread (0..3) and the shuffle mask of its four lanes: rows of a warp leave
// their key loops at different keys, so a reduction names only its own row's lanes.
struct RowLanes {
  static_assert(kLanesPerRow == 4 && 32 % kLanesPerRow == 0, "the mask below names 4 aligned lanes of a warp");
  int part;
  unsigned mask;
  __device__ RowLanes() : part(int(threadIdx.x) % kLanesPerRow), mask(0xFu << (threadIdx.x % 32 / 4 * 4)) {}
};

// a · b over the whole row: this thread's columns (a its registers, b a shared-memory row), then the
// sum over the row's four lanes. All four get the same bits (each step adds the same two numbers).
template <int D>
__device__ __forceinline__ float dot(const float (&a)[D / kLanesPerRow], const float* b, const RowLanes& lanes) {
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < D / kLanesPerRow; ++i) sum += a[i] * b[lanes.part + kLanesPerRow * i];
  sum += __shfl_xor_sync(lanes.mask, sum, 1);
  sum += __shfl_xor_sync(lanes.mask, sum, 2);
  return sum;
}

// The last key query `row` sees: N_k − 1, or row + N_k − N under the causal mask; −1 for a row past N.
__device__ __forceinline__ int64_t last_key_of(const LayerExtents& extents, int64_t row) {
  const int64_t seq = extents.seq, seq_k = extents.seq_k;
  if (row >= seq) return -1;
  return extents.causal ? min(row + seq_k - seq, seq_k - 1) : seq_k - 1;
}

// grid (ceil(N/64), BH); Q, O: [BH, N, D]; K, V: [BG, N_k, D]; lse: [BH, N] (natural log).
// kDropout: O = P̃·V, P̃ = P ∘ Z/(1 − p), the normaliser l summing the undropped weights.
template <int D, bool kDropout>
__global__ void __launch_bounds__(kThreads, 2) simt_forward_kernel(const float* __restrict__ Q,
                                                                     const float* __restrict__ K,
                                                                     const float* __restrict__ V, float* __restrict__ O,
                                                                     float* __restrict__ lse, LayerExtents extents,
                                                                     float scale_log2, philox::DropoutMask dropout) {
  __shared__ float sK[kTileRows][D], sV[kTileRows][D];
  const int64_t seq = extents.seq, seq_k = extents.seq_k;
  const RowLanes lanes;
  const int64_t head = blockIdx.y, q0 = int64_t(blockIdx.x) * kRowsPerBlock;
  const int64_t row = q0 + threadIdx.x / kLanesPerRow;
  const int64_t offset = head * seq * D, kv_offset = head / extents.group_size * seq_k * D;
  static_assert(D % kLanesPerRow == 0, "each of a row's lanes holds D / kLanesPerRow columns");
  constexpr int kCols = D / kLanesPerRow;
  float q[kCols], o[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    q[i] = row < seq ? Q[offset + row * D + lanes.part + kLanesPerRow * i] : 0.0f;
    o[i] = 0.0f;
  }
  const int64_t row_last_key = last_key_of(extents, row);
  const int64_t block_last_key = last_key_of(extents, min(q0 + kRowsPerBlock, seq) - 1);
  const uint64_t row_element = uint64_t((head * seq + row) * seq_k);  // dropout element of key 0
  DropoutRowWalk drop(dropout);
  float m = -INFINITY, l = 0.0f;  // running max [log2 units], running sum
  for (int64_t k0 = 0; k0 <= block_last_key; k0 += kTileRows) {
    __syncthreads();
    load_rows<D>(sK, K + kv_offset, k0, seq_k);
    load_rows<D>(sV, V + kv_offset, k0, seq_k);
    __syncthreads();
    for (int j = 0; j < kTileRows; ++j) {
      const int64_t key = k0 + j;
      if (key > row_last_key) break;
      const float s = dot<D>(q, sK[j], lanes) * scale_log2;
      const float new_max = fmaxf(m, s);
      const float alpha = exp2f(m - new_max), p = exp2f(s - new_max);
      l = l * alpha + p;
      float weight = p;
      if constexpr (kDropout) weight *= drop.factor(row_element + key);
#pragma unroll
      for (int i = 0; i < kCols; ++i) o[i] = o[i] * alpha + weight * sV[j][lanes.part + kLanesPerRow * i];
      m = new_max;
    }
  }
  if (row >= seq) return;
  const float inverse = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key: O = 0
#pragma unroll
  for (int i = 0; i < kCols; ++i) O[offset + row * D + lanes.part + kLanesPerRow * i] = o[i] * inverse;
  if (lanes.part == 0) lse[head * seq + row] = l > 0.0f ? (m + log2f(l)) * kLn2 : INFINITY;
}

// dQ_i = scale · Σ_j dS_ij K_j, dS_ij = P_ij (dP_ij − D_i), P_ij = exp(S_ij − LSE_i), where
// dP_ij = dO_i·V_j, or with dropout dP_ij = (dO_i·V_j) Z_ij/(1 − p). grid (ceil(N/64), BH);
// dq_accumulator [BH, N, D].
template <int D, bool kDropout>
__global__ void __launch_bounds__(kThreads) simt_dq_kernel(const float* __restrict__ Q, const float* __restrict__ K,
                                                                const float* __restrict__ V,
                                                                const float* __restrict__ dO,
                                                                const float* __restrict__ lse,
                                                                const float* __restrict__ row_dot,
                                                                float* __restrict__ dq_accumulator,
                                                                LayerExtents extents, float scale, float scale_log2,
                                                                philox::DropoutMask dropout) {
  __shared__ float sK[kTileRows][D], sV[kTileRows][D];
  const int64_t seq = extents.seq, seq_k = extents.seq_k;
  const RowLanes lanes;
  const int64_t head = blockIdx.y, q0 = int64_t(blockIdx.x) * kRowsPerBlock;
  const int64_t row = q0 + threadIdx.x / kLanesPerRow;
  const int64_t offset = head * seq * D, kv_offset = head / extents.group_size * seq_k * D;
  static_assert(D % kLanesPerRow == 0, "each of a row's lanes holds D / kLanesPerRow columns");
  constexpr int kCols = D / kLanesPerRow;
  float q[kCols], dout[kCols], dq[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    const int64_t k = offset + row * D + lanes.part + kLanesPerRow * i;
    q[i] = row < seq ? Q[k] : 0.0f;
    dout[i] = row < seq ? dO[k] : 0.0f;
    dq[i] = 0.0f;
  }
  const float row_lse = row < seq ? lse[head * seq + row] * kLog2e : 0.0f;
  const float row_d = row < seq ? row_dot[head * seq + row] : 0.0f;
  const int64_t row_last_key = last_key_of(extents, row);
  const int64_t block_last_key = last_key_of(extents, min(q0 + kRowsPerBlock, seq) - 1);
  const uint64_t row_element = uint64_t((head * seq + row) * seq_k);
  DropoutRowWalk drop(dropout);
  for (int64_t k0 = 0; k0 <= block_last_key; k0 += kTileRows) {
    __syncthreads();
    load_rows<D>(sK, K + kv_offset, k0, seq_k);
    load_rows<D>(sV, V + kv_offset, k0, seq_k);
    __syncthreads();
    for (int j = 0; j < kTileRows; ++j) {
      const int64_t key = k0 + j;
      if (key > row_last_key) break;
      const float p = exp2f(dot<D>(q, sK[j], lanes) * scale_log2 - row_lse);
      float dp = dot<D>(dout, sV[j], lanes);
      if constexpr (kDropout) dp *= drop.factor(row_element + key);
      const float ds = p * (dp - row_d);
#pragma unroll
      for (int i = 0; i < kCols; ++i) dq[i] += ds * sK[j][lanes.part + kLanesPerRow * i];
    }
  }
  if (row >= seq) return;
#pragma unroll
  for (int i = 0; i < kCols; ++i) dq_accumulator[offset + row * D + lanes.part + kLanesPerRow * i] += scale * dq[i];
}

// dV_j = Σ_i P̃_ij dO_i and dK_j = scale · Σ_i dS_ij Q_i over the queries i of the r query heads
// that read K/V head g, into `dv_accumulator` and `dk_accumulator` [BG, N_k, D] (zeroed by the
// caller; each key row has one thread quad, so no atomics). grid (ceil(N_k/64), BG).
template <int D, bool kDropout>
__global__ void __launch_bounds__(kThreads) simt_dkdv_kernel(const float* __restrict__ Q,
                                                                  const float* __restrict__ K,
                                                                  const float* __restrict__ V,
                                                                  const float* __restrict__ dO,
                                                                  const float* __restrict__ lse,
                                                                  const float* __restrict__ row_dot,
                                                                  float* __restrict__ dk_accumulator,
                                                                  float* __restrict__ dv_accumulator,
                                                                  LayerExtents extents, float scale, float scale_log2,
                                                                  philox::DropoutMask dropout) {
  __shared__ float sQ[kTileRows][D], sdO[kTileRows][D];
  __shared__ float sLse[kTileRows], sRowDot[kTileRows];
  const int64_t seq = extents.seq, seq_k = extents.seq_k, shift = seq_k - seq;
  const RowLanes lanes;
  const int64_t kv_head = blockIdx.y, k0 = int64_t(blockIdx.x) * kRowsPerBlock;
  const int64_t key = k0 + threadIdx.x / kLanesPerRow;
  const int64_t kv_offset = kv_head * seq_k * D;
  static_assert(D % kLanesPerRow == 0, "each of a row's lanes holds D / kLanesPerRow columns");
  constexpr int kCols = D / kLanesPerRow;
  float k_row[kCols], v_row[kCols], dk[kCols], dv[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    const int64_t k = kv_offset + key * D + lanes.part + kLanesPerRow * i;
    k_row[i] = key < seq_k ? K[k] : 0.0f;
    v_row[i] = key < seq_k ? V[k] : 0.0f;
    dk[i] = dv[i] = 0.0f;
  }
  // Causal: query i sees key j when i ≥ j − shift, so this thread's first viewer is key − shift and
  // the block's is k0 − shift (no query before it sees any of its keys). A key past N_k: nobody.
  const int64_t first_viewer = key >= seq_k ? seq : extents.causal ? max(key - shift, int64_t(0)) : 0;
  const int64_t first_query = extents.causal ? max(k0 - shift, int64_t(0)) : 0;
  for (int member = 0; member < extents.group_size; ++member) {
    const int64_t head = kv_head * extents.group_size + member, offset = head * seq * D;
    for (int64_t q0 = first_query; q0 < seq; q0 += kTileRows) {
      __syncthreads();
      load_rows<D>(sQ, Q + offset, q0, seq);
      load_rows<D>(sdO, dO + offset, q0, seq);
      if (threadIdx.x < kTileRows) {
        const int64_t query = q0 + threadIdx.x;
        sLse[threadIdx.x] = query < seq ? lse[head * seq + query] * kLog2e : 0.0f;
        sRowDot[threadIdx.x] = query < seq ? row_dot[head * seq + query] : 0.0f;
      }
      __syncthreads();
      const int rows = int(min(seq - q0, int64_t(kTileRows)));
      for (int i = 0; i < rows; ++i) {
        const int64_t query = q0 + i;
        if (query < first_viewer) continue;
        const float p = exp2f(dot<D>(k_row, sQ[i], lanes) * scale_log2 - sLse[i]);
        float dp = dot<D>(v_row, sdO[i], lanes), dropped_p = p;
        if constexpr (kDropout) {
          const float factor = dropout.factor(uint64_t((head * seq + query) * seq_k + key));
          dp *= factor;
          dropped_p *= factor;
        }
        const float ds = p * (dp - sRowDot[i]);
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          dv[c] += dropped_p * sdO[i][lanes.part + kLanesPerRow * c];
          dk[c] += ds * sQ[i][lanes.part + kLanesPerRow * c];
        }
      }
    }
  }
  if (key >= seq_k) return;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int64_t k = kv_offset + key * D + lanes.part + kLanesPerRow * c;
    dk_accumulator[k] += scale * dk[c];
    dv_accumulator[k] += dv[c];
  }
}

// ceil(rows/64) blocks along x, one row of them per head.
dim3 row_grid(int64_t rows, int64_t heads) {
  if (heads > 65535) throw RuntimeFailure("v2 on CUDA supports at most 65535 heads (B·H)");
  return dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(heads));
}

template <int D, bool kDropout>
void forward_dim(const LayerShape& shape, const float* Q, const float* K, const float* V, float* O, float* lse,
                 cudaStream_t stream) {
  simt_forward_kernel<D, kDropout><<<row_grid(shape.seq, shape.heads_total), kThreads, 0, stream>>>(
      Q, K, V, O, lse, LayerExtents::of(shape), shape.scale * kLog2e, shape.dropout);
  check_launch("simt_forward_kernel");
}

template <int D, bool kDropout>
void backward_dim(const LayerShape& shape, const float* Q, const float* K, const float* V, const float* dO,
                  const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                  float* dv_accumulator, cudaStream_t stream) {
  const LayerExtents extents = LayerExtents::of(shape);
  simt_dq_kernel<D, kDropout><<<row_grid(shape.seq, shape.heads_total), kThreads, 0, stream>>>(
      Q, K, V, dO, lse, row_dot, dq_accumulator, extents, shape.scale, shape.scale * kLog2e, shape.dropout);
  check_launch("simt_dq_kernel");
  simt_dkdv_kernel<D, kDropout><<<row_grid(shape.seq_k, shape.kv_heads_total()), kThreads, 0, stream>>>(
      Q, K, V, dO, lse, row_dot, dk_accumulator, dv_accumulator, extents, shape.scale, shape.scale * kLog2e, shape.dropout);
  check_launch("simt_dkdv_kernel");
}

template <bool kDropout>
void forward_dropout(const LayerShape& shape, const float* Q, const float* K, const float* V, float* O, float* lse,
                     cudaStream_t stream) {
  if (shape.head_dim == 64) return forward_dim<64, kDropout>(shape, Q, K, V, O, lse, stream);
  return forward_dim<128, kDropout>(shape, Q, K, V, O, lse, stream);
}

template <bool kDropout>
void backward_dropout(const LayerShape& shape, const float* Q, const float* K, const float* V, const float* dO,
                      const float* lse, const float* row_dot, float* dq, float* dk, float* dv,
                      cudaStream_t stream) {
  if (shape.head_dim == 64) return backward_dim<64, kDropout>(shape, Q, K, V, dO, lse, row_dot, dq, dk, dv, stream);
  return backward_dim<128, kDropout>(shape, Q, K, V, dO, lse, row_dot, dq, dk, dv, stream);
}

}  // namespace

void flash_forward_simt(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                        cudaStream_t stream) {
  const auto* q = static_cast<const float*>(Q);
  const auto* k = static_cast<const float*>(K);
  const auto* v = static_cast<const float*>(V);
  auto* o = static_cast<float*>(O);
  if (shape.dropout.active()) return forward_dropout<true>(shape, q, k, v, o, lse, stream);
  forward_dropout<false>(shape, q, k, v, o, lse, stream);
}

void flash_backward_simt(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                         const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                         float* dv_accumulator, cudaStream_t stream) {
  const auto* q = static_cast<const float*>(Q);
  const auto* k = static_cast<const float*>(K);
  const auto* v = static_cast<const float*>(V);
  const auto* dout = static_cast<const float*>(dO);
  if (shape.dropout.active())
    return backward_dropout<true>(shape, q, k, v, dout, lse, row_dot, dq_accumulator, dk_accumulator, dv_accumulator,
                                  stream);
  backward_dropout<false>(shape, q, k, v, dout, lse, row_dot, dq_accumulator, dk_accumulator, dv_accumulator, stream);
}

}  // namespace flashbench::cuda
