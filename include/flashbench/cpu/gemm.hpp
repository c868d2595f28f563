#pragma once
// Single-threaded fp32 matrix product on row-major operands. Attention kernels call it from inside
// their own OpenMP parallel loops, one tile per call, so it never spawns threads itself.
#include <cstdint>

namespace flashbench::cpu {

enum class Op { none, transpose };

// C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C[M,N]
// A is [M,K] (lda ≥ K) or, with Op::transpose, [K,M] (lda ≥ M); B likewise [K,N] or [N,K].
// beta == 0 ignores what C held (it may be uninitialised).
void gemm(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The same product as plain loops in double accumulation: the oracle gemm is tested against.
void gemm_reference(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace flashbench::cpu
