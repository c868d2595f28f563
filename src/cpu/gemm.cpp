#include "flashbench/cpu/gemm.hpp"

#include <algorithm>
#include <cstring>

namespace flashbench::cpu {
namespace {

// Register tile of the micro-kernel: kMr rows × kNr columns of C held in 2·kMr vector registers
// (16 floats each). 8 × 32 uses 16 of the 32 AVX-512 registers for accumulators.
constexpr int64_t kMr = 8;
constexpr int64_t kNr = 32;
// Cache blocking: a kKc × kNc panel of B stays in L2, a kMc × kKc panel of A in L1/L2.
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 64;
constexpr int64_t kNc = 1024;

using vec16 = float __attribute__((vector_size(64)));

// Packing scratch, fixed per thread; it is reused by every call and never grows.
alignas(64) thread_local float packed_a[kMc * kKc];
alignas(64) thread_local float packed_b[kKc * kNc];

inline float element(const float* X, int64_t ld, Op op, int64_t row, int64_t col) {
  return op == Op::none ? X[row * ld + col] : X[col * ld + row];
}

// packed_a: for each kMr-row strip, k-major: strip[k * kMr + r] = op(A)[i0 + r, k0 + k], zero-padded.
void pack_a(Op op, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc) {
  for (int64_t strip = 0; strip < mc; strip += kMr) {
    float* dst = packed_a + strip * kc;
    const int64_t rows = std::min(kMr, mc - strip);
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t r = 0; r < rows; ++r) dst[k * kMr + r] = element(A, lda, op, i0 + strip + r, k0 + k);
      for (int64_t r = rows; r < kMr; ++r) dst[k * kMr + r] = 0.0f;
    }
  }
}

// packed_b: for each kNr-column strip, k-major: strip[k * kNr + c] = op(B)[k0 + k, j0 + c], zero-padded.
void pack_b(Op op, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc) {
  for (int64_t strip = 0; strip < nc; strip += kNr) {
    float* dst = packed_b + strip * kc;
    const int64_t cols = std::min(kNr, nc - strip);
    if (op == Op::none && cols == kNr) {
      for (int64_t k = 0; k < kc; ++k)
        std::memcpy(dst + k * kNr, B + (k0 + k) * ldb + j0 + strip, kNr * sizeof(float));
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t c = 0; c < cols; ++c) dst[k * kNr + c] = element(B, ldb, op, k0 + k, j0 + strip + c);
      for (int64_t c = cols; c < kNr; ++c) dst[k * kNr + c] = 0.0f;
    }
  }
}

// acc[kMr][2] = Σ_k a[k, r] · b[k, :] over one packed A strip and one packed B strip.
inline void micro_kernel(int64_t kc, const float* a, const float* b, vec16 acc[kMr][2]) {
  for (int64_t r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = vec16{};
  for (int64_t k = 0; k < kc; ++k) {
    vec16 b0, b1;
    std::memcpy(&b0, b + k * kNr, sizeof(vec16));
    std::memcpy(&b1, b + k * kNr + 16, sizeof(vec16));
    for (int64_t r = 0; r < kMr; ++r) {
      const float ar = a[k * kMr + r];
      acc[r][0] += ar * b0;
      acc[r][1] += ar * b1;
    }
  }
}

// C tile = alpha · acc + beta · C over the valid rows × cols of the tile.
inline void store_tile(const vec16 acc[kMr][2], int64_t rows, int64_t cols, float alpha, float beta,
                       float* C, int64_t ldc) {
  alignas(64) float tile[kMr][kNr];
  std::memcpy(tile, acc, sizeof(tile));
  for (int64_t r = 0; r < rows; ++r) {
    float* c = C + r * ldc;
    if (beta == 0.0f) {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * tile[r][j];
    } else {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * tile[r][j] + beta * c[j];
    }
  }
}

}  // namespace

void gemm(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  for (int64_t j0 = 0; j0 < N; j0 += kNc) {
    const int64_t nc = std::min(kNc, N - j0);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t kc = std::min(kKc, K - k0);
      const float beta_block = k0 == 0 ? beta : 1.0f;  // later K blocks accumulate
      pack_b(op_b, B, ldb, k0, kc, j0, nc);
      for (int64_t i0 = 0; i0 < M; i0 += kMc) {
        const int64_t mc = std::min(kMc, M - i0);
        pack_a(op_a, A, lda, i0, mc, k0, kc);
        for (int64_t js = 0; js < nc; js += kNr) {
          for (int64_t is = 0; is < mc; is += kMr) {
            vec16 acc[kMr][2];
            micro_kernel(kc, packed_a + is * kc, packed_b + js * kc, acc);
            store_tile(acc, std::min(kMr, mc - is), std::min(kNr, nc - js), alpha, beta_block,
                       C + (i0 + is) * ldc + j0 + js, ldc);
          }
        }
      }
    }
  }
}

void gemm_reference(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k)
        sum += double(element(A, lda, op_a, i, k)) * double(element(B, ldb, op_b, k, j));
      const double old = beta == 0.0f ? 0.0 : double(beta) * C[i * ldc + j];
      C[i * ldc + j] = float(double(alpha) * sum + old);
    }
}

}  // namespace flashbench::cpu
