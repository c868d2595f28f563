#pragma once
// The table of one ISA's kernels (src/cpu/isa/, compiled once per ISA). cpu::gemm, cpu::forward,
// cpu::backward and the rest (gemm.hpp, attention.hpp) call through the active ISA's table
// (isa.hpp); tests call a given ISA's table to check every path this CPU can run, and `info --peak`
// times the FMA loop of the active one.
#include <cstdint>

#include "flashbench/cpu/attention.hpp"
#include "flashbench/cpu/gemm.hpp"
#include "flashbench/cpu/isa.hpp"

namespace flashbench::cpu {

struct IsaKernels {
  Isa isa;
  int64_t lanes;  // fp32 lanes of one vector

  // gemm.hpp, attention.hpp
  void (*gemm)(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
  void (*validate)(const Tiling& tiling);
  int64_t (*workspace_elements)(Variant variant, Pass pass, const LayerShape& shape, const Tiling& tiling,
                                int threads);
  void (*forward)(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
                  const float* V, float* O, const KeptView& kept, MemorySpace& space);
  void (*backward)(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
                   const float* V, const float* O, const float* dO, const KeptView& kept, float* dQ, float* dK,
                   float* dV, MemorySpace& space);

  // The FMA peak loop: `steps` rounds of fma_chains independent vector FMAs (a·b + c) from `seed`;
  // returns the chains' sum so the work stays live. Flop: 2 · lanes · fma_chains · steps.
  float (*fma_loop)(float seed, int64_t steps);
  int fma_chains;

  // The vector math of the softmax rows (vector_math.hpp), for its tests.
  float exp_flush_below;  // exp(x) is exactly 0 below this
  void (*exp_array)(const float* x, float* y, int64_t n);
  float (*row_max)(const float* x, int64_t n);
  float (*exp_scaled_shifted_sum)(float* x, int64_t n, float scale, float shift);
  void (*scale_row)(float* x, int64_t n, float factor);
  float (*dot)(const float* a, const float* b, int64_t n);
};

// The table of `isa` (whether or not this CPU can run it) and of the active ISA.
const IsaKernels& isa_kernels(Isa isa);
const IsaKernels& active_kernels();

}  // namespace flashbench::cpu
