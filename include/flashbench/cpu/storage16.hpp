#pragma once
// 16-bit storage (bf16, fp16) on the CPU: inputs, activations and kept tensors live in 16 bits, the
// arithmetic stays fp32. A layer widens its input into fp32 staging, runs the fp32 kernels and rounds
// what it keeps. standard and v1 run one head at a time so that their fp32 N×N temporary is one
// head's [N, N], not the layer's [B·H, N, N]; the kept copy is the rounded [B·H, N, N]. checkpoint's
// backward recomputes P one head at a time for the same reason, so it holds what standard holds
// there less the kept copy.
#include <cstdint>

#include "flashbench/core/storage.hpp"
#include "flashbench/cpu/attention.hpp"

namespace flashbench::cpu {

// Whole arrays, in parallel (storage.hpp rounds one element).
void round_to_storage(Dtype dtype, const float* x, Half* out, int64_t count);
void widen_from_storage(Dtype dtype, const Half* x, float* out, int64_t count);

// What one layer keeps, per kept_per_layer, allocated by the caller: N×N tensors in 16 bits, row
// statistics in fp32. v2's O is the layer output itself.
struct KeptView16 {
  Half* scores = nullptr;    // standard: P; v1: S. [BH, N, N]
  float* row_max = nullptr;  // v1: m [BH, N]
  float* row_sum = nullptr;  // v1: l [BH, N]
  float* lse = nullptr;      // v2: LSE [BH, N]
  Half* dropped = nullptr;   // unused: 16-bit storage runs without dropout
  uint8_t* mask = nullptr;
};

// Workspace one 16-bit layer call holds at its peak [floats]: the fp32 staging of its inputs
// (forward: Q, K, V and O; backward: Q, K, V, dO, and O for v2) plus, on top of it, one head's fp32
// scores with that head's kernel workspace (standard, v1), one head's kernel workspace (checkpoint's
// backward, its recomputed P inside) or the whole layer's kernel workspace (v2, checkpoint's forward).
int64_t workspace16_elements(Variant variant, Pass pass, const LayerShape& shape, const Tiling& tiling,
                             int threads);

// Q, K, V, O: [BH, N, d] 16-bit (square: G = H, N_k = N). Fills `kept`.
void forward16(Variant variant, Dtype dtype, const LayerShape& shape, const Tiling& tiling, const Half* Q,
               const Half* K, const Half* V, Half* O, const KeptView16& kept, MemorySpace& space);

// dQ, dK, dV [BH, N, d] fp32 from dO [BH, N, d] 16-bit. O is read by v2 only.
void backward16(Variant variant, Dtype dtype, const LayerShape& shape, const Tiling& tiling, const Half* Q,
                const Half* K, const Half* V, const Half* O, const Half* dO, const KeptView16& kept, float* dQ,
                float* dK, float* dV, MemorySpace& space);

}  // namespace flashbench::cpu
