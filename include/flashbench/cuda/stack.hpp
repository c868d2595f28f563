#pragma once
// The CUDA backend seen from code that is compiled with or without CUDA (the command line, the
// tests): nothing here needs CUDA headers. A build without CUDA links src/cuda/unavailable.cpp,
// where device_count() is 0 and everything else throws UsageError.
#include <cstdint>
#include <string>
#include <vector>

#include "flashbench/memory.hpp"
#include "flashbench/problem.hpp"
#include "flashbench/result.hpp"
#include "flashbench/variant.hpp"

namespace flashbench::cuda {

// CUDA devices this binary can use; 0 when built without CUDA, without a driver or without a GPU.
int device_count();

// Outputs of one pass of the layer stack, as float.
struct StackResult {
  std::vector<float> output;      // X_L [B,H,N,d]
  std::vector<float> input_grad;  // dX_0 [B,H,N,d]
};

// One forward and backward of `variant`'s L-layer stack on device 0, from host inputs X0 and dO
// [B,H,N,d] (rounded to problem.dtype on the device). For tests and `grad`; untimed, untracked.
StackResult run_stack_once(Variant variant, const Problem& problem, const std::vector<float>& X0,
                           const std::vector<float>& dO);

// The CUDA side of the memory model: what this implementation allocates, per tag, in closed form
// (see src/cuda/stack.cpp for the schedule it reproduces). Device-dependent sizes are parameters so
// that the model also runs where there is no GPU.
struct CudaModelParams {
  int64_t blas_workspace_bytes = int64_t{32} << 20;  // handed to cuBLAS once [bytes]
  int64_t input_sets = 1;                            // rotated (X0, dO) pairs, see input_sets()
};
ModelledMemory model_memory_cuda(const Problem& problem, Variant variant, const CudaModelParams& params);

// How many (X0, dO) input sets the timing loop rotates through so that consecutive samples do not
// find their inputs in an L2 cache of `l2_bytes`: enough to exceed 2× L2, at most 4.
int64_t input_sets(const Problem& problem, int64_t l2_bytes);

}  // namespace flashbench::cuda
