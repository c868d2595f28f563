// One ISA's table of kernels (isa_kernels.hpp) and its FMA peak loop, compiled once per ISA
// (prologue.hpp).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "flashbench/cpu/isa_kernels.hpp"

#include "prologue.hpp"
#include "kernels.hpp"
#include "vector_math.hpp"

namespace flashbench::cpu::FLASHBENCH_CPU_ISA {
namespace {

// Independent FMA chains per thread: enough to cover an FMA's latency on every FMA pipe of a core
// (Zen 2: 2 pipes × 5 cycles; Zen 3/4 and Intel: 2 × 4), so the loop runs at the issue rate, and few
// enough that the chains and the two constants stay in registers (16 ymm: 12 + 2; 32 zmm: 24 + 2;
// the scalar path's 8-float vectors take two xmm each: 6 · 2 + 2 · 2). A chain more than the
// registers hold spills to the stack on every step and the "peak" falls below what a gemm reaches.
// Without -ffast-math the compiler may not merge or reorder the chains' steps.
#if FLASHBENCH_CPU_ISA_LEVEL == 3
constexpr int kFmaChains = 24;
#elif FLASHBENCH_CPU_ISA_LEVEL == 2
constexpr int kFmaChains = 12;
#else
constexpr int kFmaChains = 6;
#endif

float fma_loop(float seed, int64_t steps) {
  using namespace simd;
  vec acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = broadcast(seed + float(c));
  const vec multiplier = broadcast(0.9999999f), addend = broadcast(1e-7f);
  // Unrolled whole, or GCC keeps the chains in memory past 16 of them (a load and a store an FMA).
  for (int64_t step = 0; step < steps; ++step) {
#pragma GCC unroll 32
    for (int c = 0; c < kFmaChains; ++c) acc[c] = acc[c] * multiplier + addend;
  }
  vec sum{};
  for (int c = 0; c < kFmaChains; ++c) sum += acc[c];
  return reduce_sum(sum);
}

}  // namespace
}  // namespace flashbench::cpu::FLASHBENCH_CPU_ISA

namespace flashbench::cpu {

#define FLASHBENCH_PASTE_(a, b) a##b
#define FLASHBENCH_PASTE(a, b) FLASHBENCH_PASTE_(a, b)
// kernels_scalar, kernels_avx2, kernels_avx512: isa.cpp chooses among them.
extern const IsaKernels FLASHBENCH_PASTE(kernels_, FLASHBENCH_CPU_ISA);
const IsaKernels FLASHBENCH_PASTE(kernels_, FLASHBENCH_CPU_ISA) = {
    .isa = Isa::FLASHBENCH_CPU_ISA,
    .lanes = FLASHBENCH_CPU_ISA::simd::kLanes,
    .gemm = FLASHBENCH_CPU_ISA::gemm,
    .validate = FLASHBENCH_CPU_ISA::validate,
    .workspace_elements = FLASHBENCH_CPU_ISA::workspace_elements,
    .forward = FLASHBENCH_CPU_ISA::forward,
    .backward = FLASHBENCH_CPU_ISA::backward,
    .fma_loop = FLASHBENCH_CPU_ISA::fma_loop,
    .fma_chains = FLASHBENCH_CPU_ISA::kFmaChains,
    .exp_flush_below = FLASHBENCH_CPU_ISA::simd::kExpFlushBelow,
    .exp_array = FLASHBENCH_CPU_ISA::exp_array,
    .row_max = FLASHBENCH_CPU_ISA::row_max,
    .exp_scaled_shifted_sum = FLASHBENCH_CPU_ISA::exp_scaled_shifted_sum,
    .scale_row = FLASHBENCH_CPU_ISA::scale_row,
    .dot = FLASHBENCH_CPU_ISA::dot,
};
#undef FLASHBENCH_PASTE
#undef FLASHBENCH_PASTE_

}  // namespace flashbench::cpu

#include "epilogue.hpp"
