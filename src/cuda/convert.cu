#include <algorithm>

#include "element.cuh"
#include "flashbench/cuda/kernels.hpp"

namespace flashbench::cuda {

namespace {
template <class T>
__global__ void store_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_float<T>(src[i]);
}
template <class T>
__global__ void load_kernel(const T* __restrict__ src, float* __restrict__ dst, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = to_float(src[i]);
}
__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Box-Muller on two 32-bit uniforms of one 64-bit hash of (seed, i).
template <class T>
__global__ void normal_kernel(T* __restrict__ dst, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t bits = splitmix64(seed ^ splitmix64(uint64_t(i)));
    const float u1 = (float(uint32_t(bits >> 32)) + 1.0f) * 2.3283064365386963e-10f;  // (0, 1]
    const float u2 = float(uint32_t(bits)) * 2.3283064365386963e-10f;                  // [0, 1)
    dst[i] = from_float<T>(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

// dst[g][k] = Σ_{c<r} src[g·r + c][k]; src is float or T.
template <class T, class Source>
__global__ void sum_head_groups_kernel(const Source* __restrict__ src, T* __restrict__ dst, int64_t groups,
                                       int64_t group_size, int64_t per_head) {
  const int64_t count = groups * per_head;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t g = i / per_head, k = i % per_head;
    float sum = 0.0f;
    for (int64_t c = 0; c < group_size; ++c) sum += to_float(src[(g * group_size + c) * per_head + k]);
    dst[i] = from_float<T>(sum);
  }
}

template <class T>
__global__ void repeat_heads_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t groups,
                                    int64_t group_size, int64_t per_head) {
  const int64_t count = groups * group_size * per_head;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t head = i / per_head, k = i % per_head;
    dst[i] = src[head / group_size * per_head + k];
  }
}

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 65535;
unsigned grid_for(int64_t count) { return std::min<unsigned>(kMaxBlocks, std::max(1u, blocks_for(count, kThreads))); }
}  // namespace

void store_from_float(Dtype dtype, const float* src, void* dst, int64_t count, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    store_kernel<T><<<grid_for(count), kThreads, 0, stream>>>(src, static_cast<T*>(dst), count);
  });
  check_launch("store_from_float");
}

void sum_head_groups(Dtype dtype, const void* src, bool src_is_float, void* dst, int64_t groups, int64_t group_size,
                     int64_t per_head, cudaStream_t stream) {
  const int64_t count = groups * per_head;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (src_is_float)
      sum_head_groups_kernel<T, float><<<grid_for(count), kThreads, 0, stream>>>(
          static_cast<const float*>(src), static_cast<T*>(dst), groups, group_size, per_head);
    else
      sum_head_groups_kernel<T, T><<<grid_for(count), kThreads, 0, stream>>>(
          static_cast<const T*>(src), static_cast<T*>(dst), groups, group_size, per_head);
  });
  check_launch("sum_head_groups");
}

void repeat_heads(Dtype dtype, const void* src, void* dst, int64_t groups, int64_t group_size, int64_t per_head,
                  cudaStream_t stream) {
  const int64_t count = groups * group_size * per_head;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    repeat_heads_kernel<T><<<grid_for(count), kThreads, 0, stream>>>(static_cast<const T*>(src), static_cast<T*>(dst),
                                                                      groups, group_size, per_head);
  });
  check_launch("repeat_heads");
}

void fill_normal(Dtype dtype, void* dst, int64_t count, uint64_t seed, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    normal_kernel<T><<<grid_for(count), kThreads, 0, stream>>>(static_cast<T*>(dst), count, seed);
  });
  check_launch("fill_normal");
}

void load_to_float(Dtype dtype, const void* src, float* dst, int64_t count, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    load_kernel<T><<<grid_for(count), kThreads, 0, stream>>>(static_cast<const T*>(src), dst, count);
  });
  check_launch("load_to_float");
}

}  // namespace flashbench::cuda
