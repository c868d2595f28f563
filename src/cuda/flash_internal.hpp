#pragma once
// The implementations behind flash_forward / flash_backward (kernels.hpp): tensor cores for the
// 16-bit dtypes — wgmma on Hopper (flash_wgmma.cu, sm_90a), mma.sync elsewhere and as `v2.mma`
// (flash_mma.cu) — and plain fp32 arithmetic (no TF32, so fp32 keeps fp32 accuracy) for fp32.
// Each runs every workload of kernels.hpp (GQA, N_k ≠ N, dropout); the backward adds dQ into
// dq_accumulator [BH,N,d], dK (scale included) into dk_accumulator and dV into dv_accumulator
// [BG,N_k,d]: three distinct fp32 buffers, zeroed by the caller.
#include "flashbench/cuda/kernels.hpp"

namespace flashbench::cuda {

void flash_forward_mma(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                       cudaStream_t stream);
void flash_backward_mma(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                        const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                        float* dv_accumulator, cudaStream_t stream);

void flash_forward_wgmma(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                         cudaStream_t stream);
void flash_backward_wgmma(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                          const float* lse, const float* row_dot, float* dq_accumulator,
                          const KeyGradientTargets& key_gradients, cudaStream_t stream);

void flash_forward_simt(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                        cudaStream_t stream);
void flash_backward_simt(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* dO,
                         const float* lse, const float* row_dot, float* dq_accumulator, float* dk_accumulator,
                         float* dv_accumulator, cudaStream_t stream);

}  // namespace flashbench::cuda
