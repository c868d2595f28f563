#pragma once
// CPU (OpenMP, fp32) forward and backward of one attention layer for each variant.
//
// Shapes, one set of letters everywhere: B·H heads flattened into BH, N sequence length, d head dim.
// Q, K, V, O, dO, dQ, dK, dV are [BH, N, d] row-major; P and S are [BH, N, N]; m, l, LSE, D are
// [BH, N]. S = scale·Q·Kᵀ, P = softmax(S) row-wise, O = P·V, scale = 1/sqrt(d).
//
// What a variant keeps is allocated by the caller exactly as `kept_per_layer` states (the layer
// stack does it, and the analytic model reads the same statement); temporary buffers come from the
// memory space tagged `workspace`, sized by `workspace_elements` below.
#include <cstdint>

#include "flashbench/memory.hpp"
#include "flashbench/problem.hpp"
#include "flashbench/variant.hpp"

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
  int64_t seq;          // N
  int64_t head_dim;     // d
  bool causal;
  float scale;          // 1/sqrt(d)
  // The format v1's kept scores are stored in. v1 rounds S to it before taking the row statistics,
  // so that backward's P = exp(S − m)/l from the stored S is exactly the softmax of the stored S:
  // statistics of the unrounded S would leave the rounding uncancelled in every P (measured: 12x
  // the error of the same computation done naively in bf16, 20x in fp16).
  Dtype score_storage = Dtype::fp32;
  static LayerShape of(const Problem& problem);
};

// What one layer keeps between forward and backward, per `kept_per_layer`, allocated by the caller;
// a pointer the variant does not keep is null. v2's O is the layer output itself.
struct KeptView {
  float* scores = nullptr;   // standard: P; v1: S. [BH, N, N]
  float* row_max = nullptr;  // v1: m [BH, N]
  float* row_sum = nullptr;  // v1: l [BH, N]
  float* lse = nullptr;      // v2: LSE = m + log l [BH, N]
};

// Workspace the kernels allocate at once, in elements of float, for `threads` OpenMP threads.
enum class Pass { forward, backward };
int64_t workspace_elements(Variant variant, Pass pass, const LayerShape& shape, const Tiling& tiling,
                           int threads);

// O = attention(Q, K, V); fills what `variant` keeps.
void forward(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
             const float* V, float* O, const KeptView& kept, MemorySpace& space);

// dQ, dK, dV from dO and what forward kept. O is read by v2 only. v1 turns its kept S into P in place.
void backward(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
              const float* V, const float* O, const float* dO, const KeptView& kept, float* dQ, float* dK,
              float* dV, MemorySpace& space);

}  // namespace flashbench::cpu
