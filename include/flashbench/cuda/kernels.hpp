#pragma once
// Launchers of the CUDA kernels of one attention layer, for every variant. Host code calls these;
// the kernels live in src/cuda/*.cu.
//
// Shapes, one set of letters everywhere: B·H heads flattened into BH, N sequence length, d head dim.
// Q, K, V, O, dO, dX are [BH, N, d] row-major in the storage dtype; S, P, dP, dS are [BH, N, N] in
// the storage dtype; m, l, LSE, D are [BH, N] fp32; `accumulator` is [BH, N, d] fp32.
// S = scale·Q·Kᵀ (scale folded in by the producer), P = softmax(S) row-wise, O = P·V.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "flashbench/problem.hpp"

namespace flashbench::cuda {

struct LayerShape {
  int64_t heads_total;  // BH = B·H
  int64_t seq;          // N
  int64_t head_dim;     // d
  bool causal;
  float scale;          // 1/sqrt(d)
  Dtype dtype;
  static LayerShape of(const Problem& problem);
};

// --- row kernels of standard, v1 and checkpoint (src/cuda/softmax.cu) -------------------------

// One pass of statistics over each row of S (causal entries j > i excluded):
// m = max_j S_ij, l = Σ_j exp(S_ij − m). Either output may be null.
// With `probs` non-null, also writes P = exp(S − m)/l there (0 where masked); probs may equal scores.
void softmax_rows(const LayerShape& shape, const void* scores, void* probs, float* row_max, float* row_sum,
                  cudaStream_t stream);

// v1 backward: P = exp(S − m)/l from the kept scores and row statistics; probs may equal scores.
void probs_from_scores(const LayerShape& shape, const void* scores, const float* row_max, const float* row_sum,
                       void* probs, cudaStream_t stream);

// dS = P ∘ (dP − D) with D_i = Σ_j P_ij dP_ij over the whole row, written over dP.
void softmax_backward_rows(const LayerShape& shape, const void* probs, void* dprobs, cudaStream_t stream);

// --- v2: fused tiled kernels (src/cuda/flash_mma.cu for bf16/fp16, src/cuda/flash_simt.cu for fp32)

// Head dims the fused kernels are compiled for.
bool flash_supports(int64_t head_dim);

// Which tensor-core kernels run bf16/fp16: `best` takes wgmma on a Hopper GPU (compute capability
// 9.0) and mma.sync elsewhere; `mma_sync` keeps the earlier mma.sync kernels everywhere (`v2.mma`,
// measurable beside `v2`). fp32 always runs the SIMT kernels.
enum class FlashKernels { best, mma_sync };

// Whether `best` means wgmma on the current device.
bool flash_uses_wgmma(Dtype dtype, FlashKernels kernels);

// O = attention(Q, K, V) with online softmax; LSE = m + log l per row [BH, N] fp32.
void flash_forward(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                   FlashKernels kernels, cudaStream_t stream);

// Backward, FlashAttention-2 style: a pre-pass D = rowsum(dO ∘ O) [BH, N] into `row_dot`, then one
// kernel over column blocks recomputing S and P per tile. Adds dQ + dK + dV into `accumulator`
// (which the pre-pass zeroes): the layer stack only needs their sum, dX.
void flash_backward(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* O,
                    const void* dO, const float* lse, float* row_dot, float* accumulator, FlashKernels kernels,
                    cudaStream_t stream);

// --- conversions (src/cuda/convert.cu) ------------------------------------------------------

// dst[i] = storage(src[i]) for `count` elements.
void store_from_float(Dtype dtype, const float* src, void* dst, int64_t count, cudaStream_t stream);
// dst[i] = float(src[i]).
void load_to_float(Dtype dtype, const void* src, float* dst, int64_t count, cudaStream_t stream);

// `count` standard-normal numbers into dst (storage dtype) from a counter-based generator: element i
// depends only on (seed, i).
void fill_normal(Dtype dtype, void* dst, int64_t count, uint64_t seed, cudaStream_t stream);

}  // namespace flashbench::cuda
