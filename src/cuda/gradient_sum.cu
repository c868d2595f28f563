// dX += dK + dV (gradient_sum.hpp).
#include "gradient_sum.hpp"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "flashbench/errors.hpp"

namespace flashbench::cuda {

namespace {

__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
template <class T>
__device__ __forceinline__ T narrow(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half narrow<__half>(float x) { return __float2half_rn(x); }

template <class T>
__global__ void add_kernel(T* __restrict__ dX, const T* __restrict__ dK, const T* __restrict__ dV, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    dX[i] = narrow<T>(widen(dX[i]) + widen(dK[i]) + widen(dV[i]));
}

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <class T>
void launch(void* dX, const void* dK, const void* dV, int64_t count, cudaStream_t stream) {
  const int64_t blocks = std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, kMaxBlocks);
  add_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(static_cast<T*>(dX), static_cast<const T*>(dK),
                                                           static_cast<const T*>(dV), count);
}

}  // namespace

void add_gradients(Dtype dtype, void* dX, const void* dK, const void* dV, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  switch (dtype) {
    case Dtype::bf16: launch<__nv_bfloat16>(dX, dK, dV, count, stream); break;
    case Dtype::fp16: launch<__half>(dX, dK, dV, count, stream); break;
    case Dtype::fp32: throw RuntimeFailure("add_gradients: fp32 is not a 16-bit storage type");
  }
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess)
    throw RuntimeFailure(std::string("add_gradients launch: ") + cudaGetErrorString(status));
}

}  // namespace flashbench::cuda
