#pragma once
// CPU (OpenMP, fp32) forward and backward of one attention layer for each variant.
//
// Shapes, one set of letters everywhere: B·H query heads flattened into BH, B·G key/value heads into
// BG, N query rows, N_k key/value rows, d head dim. Q, O, dO, dQ are [BH, N, d] row-major; K, V, dK,
// dV [BG, N_k, d]; P and S are [BH, N, N_k]; m, l, LSE, D are [BH, N]. Query head h reads K/V head
// h / r, r = H/G (the flattened index works out: b·H + j over r is b·G + j/r), and dK, dV of a K/V
// head sum over its r query heads (GQA; r = H is MQA). S = scale·Q·Kᵀ, P = softmax(S) row-wise,
// O = P·V, scale = 1/sqrt(d). The causal mask is aligned bottom-right (FlashAttention ≥ 2.1, PyTorch's
// causal_lower_right): row i sees columns j ≤ i + N_k − N, so a row that sees none (N > N_k) gets
// O = 0 and contributes nothing to any gradient.
//
// What a variant keeps is allocated by the caller exactly as `kept_per_layer` states (the layer
// stack does it, and the analytic model reads the same statement); temporary buffers come from the
// memory space tagged `workspace`, sized by `workspace_elements` below.
#include <cstdint>

#include "flashbench/core/memory.hpp"
#include "flashbench/core/philox.hpp"
#include "flashbench/core/problem.hpp"
#include "flashbench/core/variant.hpp"

namespace flashbench::cpu {

// Tile sizes [rows]: a row block of Q (Br) against a column block of K/V (Bc). Under the causal mask
// v2 cuts the diagonal into chunks of Bg columns (a whole number of SIMD registers: v2's forward keeps
// one SIMD register of rows together and starts a chunk's rows at r0 + Bg·k).
// v2's backward either gives each thread whole heads (each tile computed once) or splits heads over
// column blocks and then row blocks (balanced, but S and dP computed twice); `automatic` chooses by
// the heads per thread (attention.cpp says how).
enum class V2BackwardPath { automatic, whole_heads, split_heads };

struct Tiling {
  int64_t row_block = 64;       // Br
  int64_t col_block = 128;      // Bc
  int64_t diagonal_block = 32;  // Bg
  V2BackwardPath v2_backward = V2BackwardPath::automatic;
};

// Throws UsageError unless Br, Bc ≥ 1 and Bg is a positive multiple of the SIMD width. forward,
// backward and workspace_elements call it.
void validate(const Tiling& tiling);

// The shape of one layer as the kernels see it.
struct LayerShape {
  int64_t heads_total;  // BH = B·H
  int64_t seq;          // N (query rows)
  int64_t head_dim;     // d
  bool causal;
  float scale;          // 1/sqrt(d)
  // The format v1's kept scores are stored in. v1 rounds S to it before taking the row statistics,
  // so that backward's P = exp(S − m)/l from the stored S is exactly the softmax of the stored S:
  // statistics of the unrounded S would leave the rounding uncancelled in every P (measured: 12x
  // the error of the same computation done naively in bf16, 20x in fp16).
  Dtype score_storage = Dtype::fp32;
  int64_t keys = 0;        // N_k, key/value rows; 0: N
  int64_t group_size = 1;  // r = H/G, query heads per K/V head
  // Dropout on the attention weights: P̃ = P ∘ Z/(1 − p), O = P̃·V, Z drawn per element of the
  // [BH, N, N_k] weights (philox.hpp); inactive by default. of() keys it with seed 0 and offset 0: a
  // layer call keys it with its stack's seed and its layer.
  philox::DropoutMask dropout = {};

  int64_t key_rows() const { return keys > 0 ? keys : seq; }      // N_k
  int64_t kv_heads_total() const { return heads_total / group_size; }  // BG
  // The kernels' view of a layer: G = H where the problem repeats K and V to H heads (expand_kv).
  static LayerShape of(const Problem& problem);
};

// What one layer keeps between forward and backward, per `kept_per_layer`, allocated by the caller;
// a pointer the variant does not keep is null. v2's O is the layer output itself.
struct KeptView {
  float* scores = nullptr;   // standard: P; v1: S. [BH, N, N_k]
  float* dropped = nullptr;  // with dropout, standard and v1: P̃ = P ∘ Z/(1 − p) [BH, N, N_k]
  uint8_t* mask = nullptr;   // ... and Z, 1 = kept [BH, N, N_k]
  float* row_max = nullptr;  // v1: m [BH, N]
  float* row_sum = nullptr;  // v1: l [BH, N]
  float* lse = nullptr;      // v2: LSE = m + log l [BH, N]
};

// Workspace the kernels allocate at once, in elements of float, for `threads` OpenMP threads.
enum class Pass { forward, backward };
int64_t workspace_elements(Variant variant, Pass pass, const LayerShape& shape, const Tiling& tiling,
                           int threads);

// O = attention(Q, K, V), Q [BH, N, d], K, V [BG, N_k, d]; fills what `variant` keeps.
void forward(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
             const float* V, float* O, const KeptView& kept, MemorySpace& space);

// dQ [BH, N, d], dK, dV [BG, N_k, d] (each K/V head's summed over its query heads) from dO and what
// forward kept. O is read by v2 only. v1 turns its kept S into P in place.
void backward(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
              const float* V, const float* O, const float* dO, const KeptView& kept, float* dQ, float* dK,
              float* dV, MemorySpace& space);

}  // namespace flashbench::cpu
