#pragma once
// Launchers of the CUDA kernels of one attention layer, for every variant. Host code calls these;
// the kernels live in src/cuda/*.cu.
//
// Shapes, one set of letters everywhere: B·H query heads flattened into BH, B·G key/value heads into
// BG (r = H/G query heads share one: query head h reads K/V head h / r), N query rows, N_k key rows,
// d head dim. Q, O, dO, dQ are [BH, N, d] and K, V, dK, dV [BG, N_k, d] row-major in the storage
// dtype; S, P, dP, dS and the dropout mask Z (1 byte) are [BH, N, N_k]; m, l, LSE, D are [BH, N] fp32.
// S = scale·Q·Kᵀ (scale folded in by the producer), P = softmax(S) row-wise, O = P·V, or with dropout
// O = P̃·V, P̃ = P ∘ Z/(1 − p). The causal mask is aligned bottom-right: query i sees the keys
// j ≤ i + N_k − N (a query that sees none has O = 0).
#include <cstdint>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "flashbench/core/philox.hpp"
#include "flashbench/core/problem.hpp"

namespace flashbench::cuda {

struct LayerShape {
  int64_t heads_total;  // BH = B·H
  int64_t seq;          // N, query rows
  int64_t head_dim;     // d
  bool causal;
  float scale;          // 1/sqrt(d)
  Dtype dtype;
  int64_t seq_k = 0;       // N_k, key rows (LayerShape::of sets it)
  int64_t group_size = 1;  // r, query heads per K/V head as the kernels see them (1 under expand_kv)
  philox::DropoutMask dropout{};  // of(): active where the problem has dropout; a layer call keys it

  int64_t kv_heads_total() const { return heads_total / group_size; }  // BG
  int64_t causal_shift() const { return seq_k - seq; }                 // query i sees keys j ≤ i + shift
  // The problem's shape; K/V repeated to H heads (expand_kv) count as G = H.
  static LayerShape of(const Problem& problem);
};

// --- row kernels of standard, v1 and checkpoint (src/cuda/softmax.cu) -------------------------

// One pass of statistics over each row of S (causal entries j > i + N_k − N excluded):
// m = max_j S_ij, l = Σ_j exp(S_ij − m). Either output may be null.
// With `probs` non-null, also writes P = exp(S − m)/l there (0 where masked); probs may equal scores.
void softmax_rows(const LayerShape& shape, const void* scores, void* probs, float* row_max, float* row_sum,
                  cudaStream_t stream);

// v1 backward: P = exp(S − m)/l from the kept scores and row statistics; probs may equal scores.
void probs_from_scores(const LayerShape& shape, const void* scores, const float* row_max, const float* row_sum,
                       void* probs, cudaStream_t stream);

// dS = P ∘ (dP − D) with D_i = Σ_j P_ij dP_ij over the whole row, written over dP.
void softmax_backward_rows(const LayerShape& shape, const void* probs, void* dprobs, cudaStream_t stream);

// Dropout forward: P̃ = P ∘ Z/(1 − p) with Z drawn from shape.dropout (philox.hpp, element
// (h·N + i)·N_k + j), into `dropped` (may equal probs); the mask Z (1 = kept) into `mask` unless null.
void dropout_forward(const LayerShape& shape, const void* probs, void* dropped, unsigned char* mask,
                     cudaStream_t stream);

// Dropout backward: dP = dP̃ ∘ Z/(1 − p) in place, Z read from `mask`, or redrawn from shape.dropout
// where mask is null.
void dropout_backward(const LayerShape& shape, const unsigned char* mask, void* dprobs, cudaStream_t stream);

// --- v2: fused tiled kernels (src/cuda/flash_mma.cu for bf16/fp16, src/cuda/flash_simt.cu for fp32)

// Which tensor-core kernels run bf16/fp16: `best` takes wgmma on a Hopper GPU (compute capability
// 9.0) and mma.sync elsewhere; `mma_sync` keeps the earlier mma.sync kernels everywhere (`v2.mma`,
// measurable beside `v2`). fp32 always runs the SIMT kernels.
enum class FlashKernels { best, mma_sync };

// Whether `best` means wgmma on the current device.
bool flash_uses_wgmma(Dtype dtype, FlashKernels kernels);

// Why the fused kernels chosen by `kernels` do not run this shape (one line), or nothing when they
// do. Every family runs d = 64 and 128 with every workload above (GQA/MQA, N_k ≠ N, dropout); the
// wgmma kernels also d = 96 (zero-padded to 128 in shared memory), and 192 and 256 without dropout.
std::optional<std::string> flash_unsupported(const LayerShape& shape, FlashKernels kernels);
bool flash_runs(const LayerShape& shape, FlashKernels kernels);

// O = attention(Q, K, V) with online softmax; LSE = m + log l per row [BH, N] fp32 (+∞ for a row
// that sees no key).
void flash_forward(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                   FlashKernels kernels, cudaStream_t stream);

// Where v2's backward leaves dK and dV [BG, N_k, d], each summed over the r query heads of its K/V
// head: stored in the storage dtype into `dK` and `dV` where those are set (only where
// flash_stores_key_gradients says so; the accumulators are then not used), else added into the fp32
// `dk_accumulator` and `dv_accumulator`, which flash_backward zeroes first and the caller converts.
struct KeyGradientTargets {
  float* dk_accumulator = nullptr;
  float* dv_accumulator = nullptr;
  void* dK = nullptr;
  void* dV = nullptr;
};

// Whether v2's backward can store dK and dV in the storage dtype (no fp32 accumulators to zero, fill
// and convert): the wgmma kernels where each K/V head is read by one query head (group_size 1, so one
// block walks every query of its keys and holds the whole sum).
bool flash_stores_key_gradients(Dtype dtype, int64_t group_size, FlashKernels kernels);

// Backward, FlashAttention-2 style: a pre-pass D = rowsum(dO ∘ O) [BH, N] into `row_dot`, then one
// kernel over key blocks recomputing S and P per tile. dQ goes into `dq_accumulator` [BH, N, d] fp32
// (zeroed here first), dK and dV where `key_gradients` says; the fp32 buffers are distinct.
void flash_backward(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* O,
                    const void* dO, const float* lse, float* row_dot, float* dq_accumulator,
                    const KeyGradientTargets& key_gradients, FlashKernels kernels, cudaStream_t stream);

// --- conversions (src/cuda/convert.cu) ------------------------------------------------------

// dst[i] = storage(src[i]) for `count` elements.
void store_from_float(Dtype dtype, const float* src, void* dst, int64_t count, cudaStream_t stream);
// dst [G, per_head] (storage dtype) = Σ_{c<r} src[g·r + c], summed in fp32 and rounded once, src
// [G·r, per_head] in fp32 (`src_is_float`) or the storage dtype: the gradients of the K/V heads the
// kernels saw (r = 1: one each, a conversion; under expand_kv the r repeats of each) gathered into
// the layer's G heads, written over dst.
void sum_head_groups(Dtype dtype, const void* src, bool src_is_float, void* dst, int64_t groups, int64_t group_size,
                     int64_t per_head, cudaStream_t stream);
// dst [G·r, per_head] = src [G, per_head] with each head repeated r times (repeat_interleave).
void repeat_heads(Dtype dtype, const void* src, void* dst, int64_t groups, int64_t group_size, int64_t per_head,
                  cudaStream_t stream);

// dst[i] = float(src[i]).
void load_to_float(Dtype dtype, const void* src, float* dst, int64_t count, cudaStream_t stream);

// `count` standard-normal numbers into dst (storage dtype) from a counter-based generator: element i
// depends only on (seed, i).
void fill_normal(Dtype dtype, void* dst, int64_t count, uint64_t seed, cudaStream_t stream);

// Keeps the stream busy for `milliseconds` (one thread spinning on the global timer), so that what
// is queued after it starts on a busy GPU (Device::occupy).
void spin(double milliseconds, cudaStream_t stream);

}  // namespace flashbench::cuda
