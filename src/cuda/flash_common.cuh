#pragma once
// Pieces shared by the v2 (fused, tiled) kernels: the D pre-pass and the final conversion.
#include "element.cuh"
#include "flashbench/cuda/kernels.hpp"

namespace flashbench::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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

// The grid of the v2 kernels: ceil(N / rows_per_block) blocks along x, one row of them per head.
inline dim3 tile_grid(const LayerShape& shape, int64_t rows_per_block) {
  if (shape.heads_total > 65535) throw RuntimeFailure("v2 on CUDA supports at most 65535 heads (B·H)");
  return dim3(static_cast<unsigned>((shape.seq + rows_per_block - 1) / rows_per_block),
              static_cast<unsigned>(shape.heads_total));
}

// D_i = Σ_k dO_ik O_ik over the whole row (one warp per row). [BH·N rows, d] -> [BH·N]
template <class T>
__global__ void row_dot_kernel(const T* __restrict__ O, const T* __restrict__ dO, float* __restrict__ row_dot,
                               int64_t rows, int head_dim) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float sum = 0.0f;
  for (int k = lane; k < head_dim; k += 32) sum += to_float(O[row * head_dim + k]) * to_float(dO[row * head_dim + k]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) row_dot[row] = sum;
}

template <class T>
void launch_row_dot(const T* O, const T* dO, float* row_dot, int64_t rows, int head_dim, cudaStream_t stream) {
  constexpr int kThreads = 256;
  row_dot_kernel<T><<<blocks_for(rows, kThreads / 32), kThreads, 0, stream>>>(O, dO, row_dot, rows, head_dim);
  check_launch("row_dot_kernel");
}

}  // namespace flashbench::cuda
