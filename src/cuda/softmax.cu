// Row kernels of the materialising variants (standard, v1, checkpoint): one thread block per row
// of an [BH, N, N] matrix. Each row is read twice (statistics, then the elementwise pass); the
// second read mostly hits L2, since one row is at most N·2 bytes.
#include <cfloat>

#include "element.cuh"
#include "flashbench/cuda/kernels.hpp"

namespace flashbench::cuda {

namespace {

constexpr int kRowThreads = 256;

// Online softmax statistics (running max m, sum l of exp(x − m)), mergeable in any order.
struct RowStats {
  float max = -INFINITY;
  float sum = 0.0f;
};

__device__ __forceinline__ RowStats merge(RowStats a, RowStats b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return {max, 0.0f};
  return {max, a.sum * __expf(a.max - max) + b.sum * __expf(b.max - max)};
}

__device__ RowStats block_merge(RowStats stats) {
  __shared__ RowStats partial[kRowThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    RowStats other{__shfl_xor_sync(0xffffffffu, stats.max, offset), __shfl_xor_sync(0xffffffffu, stats.sum, offset)};
    stats = merge(stats, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = stats;
  __syncthreads();
  RowStats total;
  for (int w = 0; w < kRowThreads / 32; ++w) total = merge(total, partial[w]);
  return total;
}

__device__ float block_sum(float value) {
  __shared__ float partial[kRowThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kRowThreads / 32; ++w) total += partial[w];
  return total;
}

// Columns j < valid_length(i) take part; causal rows see keys j <= i.
__device__ __forceinline__ int64_t valid_length(int64_t query, int64_t seq, bool causal) {
  return causal ? query + 1 : seq;
}

// scores/probs: [BH·N rows, N]; row_max/row_sum: [BH·N]. probs may alias scores.
template <class T>
__global__ void __launch_bounds__(kRowThreads) softmax_rows_kernel(const T* scores, T* probs, float* row_max,
                                                                   float* row_sum, int64_t seq, bool causal) {
  const int64_t row = blockIdx.x;
  const int64_t length = valid_length(row % seq, seq, causal);
  const T* s = scores + row * seq;
  RowStats stats;
  for (int64_t j = threadIdx.x; j < length; j += kRowThreads) stats = merge(stats, {to_float(s[j]), 1.0f});
  stats = block_merge(stats);
  if (threadIdx.x == 0) {
    if (row_max) row_max[row] = stats.max;
    if (row_sum) row_sum[row] = stats.sum;
  }
  if (!probs) return;
  T* p = probs + row * seq;
  const float inverse_sum = 1.0f / stats.sum;
  for (int64_t j = threadIdx.x; j < seq; j += kRowThreads)
    p[j] = from_float<T>(j < length ? __expf(to_float(s[j]) - stats.max) * inverse_sum : 0.0f);
}

template <class T>
__global__ void __launch_bounds__(kRowThreads) probs_from_scores_kernel(const T* scores, const float* row_max,
                                                                        const float* row_sum, T* probs,
                                                                        int64_t seq, bool causal) {
  const int64_t row = blockIdx.x;
  const int64_t length = valid_length(row % seq, seq, causal);
  const float max = row_max[row], inverse_sum = 1.0f / row_sum[row];
  const T* s = scores + row * seq;
  T* p = probs + row * seq;
  for (int64_t j = threadIdx.x; j < seq; j += kRowThreads)
    p[j] = from_float<T>(j < length ? __expf(to_float(s[j]) - max) * inverse_sum : 0.0f);
}

// In the forward pass O_i = Σ_j P_ij V_j with P = softmax(S), so
// dS_ij = P_ij (dP_ij − Σ_k P_ik dP_ik), the sum running over the whole row (not one tile).
template <class T>
__global__ void __launch_bounds__(kRowThreads) softmax_backward_kernel(const T* probs, T* dprobs, int64_t seq,
                                                                       bool causal) {
  const int64_t row = blockIdx.x;
  const int64_t length = valid_length(row % seq, seq, causal);
  const T* p = probs + row * seq;
  T* dp = dprobs + row * seq;
  float partial = 0.0f;
  for (int64_t j = threadIdx.x; j < length; j += kRowThreads) partial += to_float(p[j]) * to_float(dp[j]);
  const float row_dot = block_sum(partial);
  for (int64_t j = threadIdx.x; j < seq; j += kRowThreads)
    dp[j] = from_float<T>(j < length ? to_float(p[j]) * (to_float(dp[j]) - row_dot) : 0.0f);
}

unsigned row_count(const LayerShape& shape) { return static_cast<unsigned>(shape.heads_total * shape.seq); }

}  // namespace

void softmax_rows(const LayerShape& shape, const void* scores, void* probs, float* row_max, float* row_sum,
                  cudaStream_t stream) {
  dispatch_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_rows_kernel<T><<<row_count(shape), kRowThreads, 0, stream>>>(
        static_cast<const T*>(scores), static_cast<T*>(probs), row_max, row_sum, shape.seq, shape.causal);
  });
  check_launch("softmax_rows");
}

void probs_from_scores(const LayerShape& shape, const void* scores, const float* row_max, const float* row_sum,
                       void* probs, cudaStream_t stream) {
  dispatch_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    probs_from_scores_kernel<T><<<row_count(shape), kRowThreads, 0, stream>>>(
        static_cast<const T*>(scores), row_max, row_sum, static_cast<T*>(probs), shape.seq, shape.causal);
  });
  check_launch("probs_from_scores");
}

void softmax_backward_rows(const LayerShape& shape, const void* probs, void* dprobs, cudaStream_t stream) {
  dispatch_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<row_count(shape), kRowThreads, 0, stream>>>(
        static_cast<const T*>(probs), static_cast<T*>(dprobs), shape.seq, shape.causal);
  });
  check_launch("softmax_backward_rows");
}

}  // namespace flashbench::cuda
