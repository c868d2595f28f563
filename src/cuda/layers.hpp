#pragma once
// One attention layer of each variant on the GPU, and the chained stack of them. Internal to
// src/cuda. Shapes as in kernels.hpp: X, O, dO, dX are [BH, N, d] in the storage dtype; with the
// layer stack's self-attention Q = K = V = X.
#include <cublas_v2.h>

#include <vector>

#include "flashbench/cuda/device_memory.hpp"
#include "flashbench/cuda/kernels.hpp"
#include "flashbench/variant.hpp"

namespace flashbench::cuda {

struct Context {
  DeviceAllocator& allocator;
  cublasHandle_t blas;
  cudaStream_t stream;
};

// What one layer keeps between forward and backward (tag `kept`), exactly kept_per_layer's list;
// v2's O is the layer output, owned by the stack.
struct KeptState {
  DeviceBuffer scores;   // standard: P; v1: S. [BH, N, N]
  DeviceBuffer row_max;  // v1: m [BH, N] fp32
  DeviceBuffer row_sum;  // v1: l [BH, N] fp32
  DeviceBuffer lse;      // v2: LSE [BH, N] fp32
};

// O = attention(X, X, X); allocates `kept` as the variant states.
void layer_forward(Variant variant, const LayerShape& shape, Context& context, const void* X, void* O,
                   KeptState& kept);

// dX = dQ + dK + dV from dO; O is read by v2 only. Releases `kept`.
void layer_backward(Variant variant, const LayerShape& shape, Context& context, const void* X, const void* O,
                    const void* dO, KeptState& kept, void* dX);

// The stack's buffers between forward and backward: outputs[i] = X_{i+1}.
struct StackState {
  std::vector<DeviceBuffer> outputs;
  std::vector<KeptState> kept;
};

// Forward through problem.layers layers from X0; the ledger phase is the caller's business.
void stack_forward(Variant variant, const Problem& problem, Context& context, const void* X0, StackState& state);

// Backward from dO down to dX_0 (returned, tag grad); frees what each layer held as it goes.
DeviceBuffer stack_backward(Variant variant, const Problem& problem, Context& context, const void* X0,
                            const void* dO, StackState& state);

// Bytes of the cuBLAS workspace the backend hands to cuBLAS (tag workspace, alive for the run).
inline constexpr int64_t kBlasWorkspaceBytes = int64_t{32} << 20;

// Standard-normal numbers from a counter-based generator: element i depends only on (seed, i).
void fill_normal(Dtype dtype, void* dst, int64_t count, uint64_t seed, cudaStream_t stream);

}  // namespace flashbench::cuda
