#pragma once
// The entry points of one ISA's kernels, in that ISA's namespace (flashbench::cpu::avx2, ...): what
// its table (table.cpp, isa_kernels.hpp) points to, and what its sources call of each other.
// Include it after prologue.hpp. The types are those of gemm.hpp and attention.hpp.
#include "flashbench/cpu/attention.hpp"
#include "flashbench/cpu/gemm.hpp"

namespace flashbench::cpu::FLASHBENCH_CPU_ISA {

void gemm(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

void validate(const Tiling& tiling);
int64_t workspace_elements(Variant variant, Pass pass, const LayerShape& shape, const Tiling& tiling, int threads);
void forward(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
             const float* V, float* O, const KeptView& kept, MemorySpace& space);
void backward(Variant variant, const LayerShape& shape, const Tiling& tiling, const float* Q, const float* K,
              const float* V, const float* O, const float* dO, const KeptView& kept, float* dQ, float* dK, float* dV,
              MemorySpace& space);

}  // namespace flashbench::cpu::FLASHBENCH_CPU_ISA

namespace flashbench::cpu {
// The ISA's own entry points by a name that does not change with the ISA: a call gemm(Op::none, ...)
// would also find cpu::gemm (the dispatcher, by argument-dependent lookup) and be ambiguous.
namespace this_isa = FLASHBENCH_CPU_ISA;
}  // namespace flashbench::cpu
