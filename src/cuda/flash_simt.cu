// v2 for fp32 without tensor cores: the same algorithm as flash_mma.cu (online softmax forward
// keeping LSE; backward recomputing P per tile from LSE and D = rowsum(dO ∘ O)), one thread per
// query row (forward, dQ) or per key row (dK, dV), tiles of 32 rows in shared memory.
// Nothing N×N is stored; dQ and dK+dV run as two kernels so that no atomics are needed.
#include "flash_common.cuh"
#include "flash_internal.hpp"

namespace flashbench::cuda {

namespace {

constexpr int kRowsPerBlock = 64;  // one thread per row
constexpr int kTileRows = 32;      // rows of the streamed operand per shared-memory tile

template <int D>
__device__ void load_rows(float (*tile)[D], const float* __restrict__ head, int64_t row0, int64_t seq) {
  for (int c = threadIdx.x; c < kTileRows * D; c += kRowsPerBlock) {
    const int r = c / D, k = c % D;
    tile[r][k] = row0 + r < seq ? head[(row0 + r) * D + k] : 0.0f;
  }
}

template <int D>
__device__ __forceinline__ float dot(const float* a, const float* b) {
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < D; ++k) sum += a[k] * b[k];
  return sum;
}

template <int D>
__global__ void __launch_bounds__(kRowsPerBlock) simt_forward_kernel(const float* __restrict__ Q,
                                                                     const float* __restrict__ K,
                                                                     const float* __restrict__ V, float* __restrict__ O,
                                                                     float* __restrict__ lse, int64_t seq,
                                                                     bool causal, float scale_log2) {
  __shared__ float sK[kTileRows][D], sV[kTileRows][D];
  const int64_t head = blockIdx.y, q0 = int64_t(blockIdx.x) * kRowsPerBlock, row = q0 + threadIdx.x;
  const int64_t offset = head * seq * D;
  float q[D], o[D];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    q[k] = row < seq ? Q[offset + row * D + k] : 0.0f;
    o[k] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;  // running max [log2 units], running sum
  const int64_t last_key = causal ? min(q0 + kRowsPerBlock - 1, seq - 1) : seq - 1;
  for (int64_t k0 = 0; k0 <= last_key; k0 += kTileRows) {
    __syncthreads();
    load_rows<D>(sK, K + offset, k0, seq);
    load_rows<D>(sV, V + offset, k0, seq);
    __syncthreads();
    for (int j = 0; j < kTileRows; ++j) {
      const int64_t key = k0 + j;
      if (key >= seq || (causal && key > row)) continue;
      const float s = dot<D>(q, sK[j]) * scale_log2;
      const float new_max = fmaxf(m, s);
      const float alpha = exp2f(m - new_max), p = exp2f(s - new_max);
      l = l * alpha + p;
#pragma unroll
      for (int k = 0; k < D; ++k) o[k] = o[k] * alpha + p * sV[j][k];
      m = new_max;
    }
  }
  if (row >= seq) return;
#pragma unroll
  for (int k = 0; k < D; ++k) O[offset + row * D + k] = o[k] / l;
  lse[head * seq + row] = (m + log2f(l)) * kLn2;
}

// dQ_i = scale · Σ_j dS_ij K_j, dS_ij = P_ij (dO_i·V_j − D_i), P_ij = exp(S_ij − LSE_i).
template <int D>
__global__ void __launch_bounds__(kRowsPerBlock) simt_dq_kernel(const float* __restrict__ Q, const float* __restrict__ K,
                                                                const float* __restrict__ V,
                                                                const float* __restrict__ dO,
                                                                const float* __restrict__ lse,
                                                                const float* __restrict__ row_dot,
                                                                float* __restrict__ accumulator, int64_t seq,
                                                                bool causal, float scale, float scale_log2) {
  __shared__ float sK[kTileRows][D], sV[kTileRows][D];
  const int64_t head = blockIdx.y, q0 = int64_t(blockIdx.x) * kRowsPerBlock, row = q0 + threadIdx.x;
  const int64_t offset = head * seq * D;
  float q[D], dout[D], dq[D];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    q[k] = row < seq ? Q[offset + row * D + k] : 0.0f;
    dout[k] = row < seq ? dO[offset + row * D + k] : 0.0f;
    dq[k] = 0.0f;
  }
  const float row_lse = row < seq ? lse[head * seq + row] * kLog2e : 0.0f;
  const float row_d = row < seq ? row_dot[head * seq + row] : 0.0f;
  const int64_t last_key = causal ? min(q0 + kRowsPerBlock - 1, seq - 1) : seq - 1;
  for (int64_t k0 = 0; k0 <= last_key; k0 += kTileRows) {
    __syncthreads();
    load_rows<D>(sK, K + offset, k0, seq);
    load_rows<D>(sV, V + offset, k0, seq);
    __syncthreads();
    for (int j = 0; j < kTileRows; ++j) {
      const int64_t key = k0 + j;
      if (key >= seq || (causal && key > row)) continue;
      const float p = exp2f(dot<D>(q, sK[j]) * scale_log2 - row_lse);
      const float ds = p * (dot<D>(dout, sV[j]) - row_d);
#pragma unroll
      for (int k = 0; k < D; ++k) dq[k] += ds * sK[j][k];
    }
  }
  if (row >= seq) return;
#pragma unroll
  for (int k = 0; k < D; ++k) accumulator[offset + row * D + k] += scale * dq[k];
}

// dV_j = Σ_i P_ij dO_i and dK_j = scale · Σ_i dS_ij Q_i, added to the same rows of `accumulator`
// (launched after simt_dq_kernel on the same stream, so plain read-modify-write is safe).
template <int D>
__global__ void __launch_bounds__(kRowsPerBlock) simt_dkdv_kernel(const float* __restrict__ Q,
                                                                  const float* __restrict__ K,
                                                                  const float* __restrict__ V,
                                                                  const float* __restrict__ dO,
                                                                  const float* __restrict__ lse,
                                                                  const float* __restrict__ row_dot,
                                                                  float* __restrict__ accumulator, int64_t seq,
                                                                  bool causal, float scale, float scale_log2) {
  __shared__ float sQ[kTileRows][D], sdO[kTileRows][D];
  __shared__ float sLse[kTileRows], sRowDot[kTileRows];
  const int64_t head = blockIdx.y, k0 = int64_t(blockIdx.x) * kRowsPerBlock, key = k0 + threadIdx.x;
  const int64_t offset = head * seq * D;
  float k_row[D], v_row[D], dk[D], dv[D];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    k_row[k] = key < seq ? K[offset + key * D + k] : 0.0f;
    v_row[k] = key < seq ? V[offset + key * D + k] : 0.0f;
    dk[k] = dv[k] = 0.0f;
  }
  const int64_t first_query = causal ? k0 : 0;
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
    for (int i = 0; i < kTileRows; ++i) {
      const int64_t query = q0 + i;
      if (query >= seq || key >= seq || (causal && key > query)) continue;
      const float p = exp2f(dot<D>(sQ[i], k_row) * scale_log2 - sLse[i]);
      const float ds = p * (dot<D>(sdO[i], v_row) - sRowDot[i]);
#pragma unroll
      for (int k = 0; k < D; ++k) {
        dv[k] += p * sdO[i][k];
        dk[k] += ds * sQ[i][k];
      }
    }
  }
  if (key >= seq) return;
#pragma unroll
  for (int k = 0; k < D; ++k) accumulator[offset + key * D + k] += scale * dk[k] + dv[k];
}

dim3 row_grid(const LayerShape& shape) {
  if (shape.heads_total > 65535) throw RuntimeFailure("v2 on CUDA supports at most 65535 heads (B·H)");
  return dim3(static_cast<unsigned>((shape.seq + kRowsPerBlock - 1) / kRowsPerBlock),
              static_cast<unsigned>(shape.heads_total));
}

template <int D>
void forward_dim(const LayerShape& shape, const float* Q, const float* K, const float* V, float* O, float* lse,
                 cudaStream_t stream) {
  simt_forward_kernel<D><<<row_grid(shape), kRowsPerBlock, 0, stream>>>(Q, K, V, O, lse, shape.seq, shape.causal,
                                                                       shape.scale * kLog2e);
  check_launch("simt_forward_kernel");
}

template <int D>
void backward_dim(const LayerShape& shape, const float* Q, const float* K, const float* V, const float* dO,
                  const float* lse, const float* row_dot, float* accumulator, cudaStream_t stream) {
  simt_dq_kernel<D><<<row_grid(shape), kRowsPerBlock, 0, stream>>>(Q, K, V, dO, lse, row_dot, accumulator, shape.seq,
                                                                   shape.causal, shape.scale, shape.scale * kLog2e);
  check_launch("simt_dq_kernel");
  simt_dkdv_kernel<D><<<row_grid(shape), kRowsPerBlock, 0, stream>>>(Q, K, V, dO, lse, row_dot, accumulator,
                                                                     shape.seq, shape.causal, shape.scale,
                                                                     shape.scale * kLog2e);
  check_launch("simt_dkdv_kernel");
}

}  // namespace

void flash_forward_simt(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                        cudaStream_t stream) {
  const auto* q = static_cast<const float*>(Q);
  const auto* k = static_cast<const float*>(K);
  const auto* v = static_cast<const float*>(V);
  auto* o = static_cast<float*>(O);
  if (shape.head_dim == 64) return forward_dim<64>(shape, q, k, v, o, lse, stream);
  return forward_dim<128>(shape, q, k, v, o, lse, stream);
}

void flash_backward_simt(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                         const float* lse, const float* row_dot, float* accumulator, cudaStream_t stream) {
  const auto* q = static_cast<const float*>(Q);
  const auto* k = static_cast<const float*>(K);
  const auto* v = static_cast<const float*>(V);
  const auto* dout = static_cast<const float*>(dO);
  if (shape.head_dim == 64) return backward_dim<64>(shape, q, k, v, dout, lse, row_dot, accumulator, stream);
  return backward_dim<128>(shape, q, k, v, dout, lse, row_dot, accumulator, stream);
}

}  // namespace flashbench::cuda
