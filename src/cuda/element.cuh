#pragma once
// Storage element types on the device and the dispatch from the run-time Dtype to a kernel template.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/problem.hpp"
#include "flashbench/cuda/device_memory.hpp"

namespace flashbench::cuda {

template <class T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// Calls `body` with a value of the storage type of `dtype` (only its type matters).
template <class Body>
void dispatch_dtype(Dtype dtype, Body&& body) {
  switch (dtype) {
    case Dtype::fp32: body(float{}); return;
    case Dtype::bf16: body(__nv_bfloat16{}); return;
    case Dtype::fp16: body(__half{}); return;
  }
}

// Calls `body` with a value of the 16-bit storage type of `dtype` (bf16, else fp16): the types of the
// tensor-core kernels.
template <class Body>
void dispatch_16bit(Dtype dtype, Body&& body) {
  if (dtype == Dtype::bf16) return body(__nv_bfloat16{});
  body(__half{});
}

// Calls `body` with std::true_type or std::false_type: a kernel's instance with or without dropout
// (runs without it never execute its code).
template <class Body>
void dispatch_dropout(bool active, Body&& body) {
  if (active) return body(std::true_type{});
  body(std::false_type{});
}

// The last launch's error, as RuntimeFailure.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

inline unsigned blocks_for(int64_t count, int threads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

}  // namespace flashbench::cuda
