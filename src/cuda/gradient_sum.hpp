#pragma once
// dX += dK + dV for an implementation whose kernels return the three input gradients apart (cuDNN):
// the layer stack needs only their sum, Q = K = V = X. Internal to src/cuda.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "flashbench/problem.hpp"

namespace flashbench::cuda {

// dX[i] = dX[i] + dK[i] + dV[i] for `count` elements of `dtype` (bf16 or fp16), summed in fp32 and
// rounded once.
void add_gradients(Dtype dtype, void* dX, const void* dK, const void* dV, int64_t count, cudaStream_t stream);

}  // namespace flashbench::cuda
