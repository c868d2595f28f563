// The fp32 matrix product of the CPU kernels (gemm.hpp), compiled once per ISA (prologue.hpp).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "flashbench/cpu/gemm.hpp"

#include "prologue.hpp"
#include "kernels.hpp"
#include "vector_math.hpp"

namespace flashbench::cpu::FLASHBENCH_CPU_ISA {
namespace {

using simd::kLanes;
using simd::load;
using simd::load_partial;
using simd::store;
using simd::store_partial;
using simd::vec;

// Register tile: up to kMaxMr rows × kNr columns of C in 2·kMaxMr accumulators. With AVX-512,
// 12 × 32 uses 24 of the 32 zmm registers and leaves room for the two B vectors of one k step; with
// AVX2, 6 × 16 uses 12 of the 16 ymm registers.
constexpr int64_t kMaxMr = kLanes == 16 ? 12 : 6;
constexpr int64_t kNr = 2 * kLanes;

// Cache blocking for large products: a packed kKc × kNc panel of B (1 MiB) lives in L2, a
// kMr × kKc strip of A (12 KiB) plus one kKc × kNr strip of B (32 KiB) in L1 during a micro-kernel.
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 120;
constexpr int64_t kNc = 1024;
// Products with at most this many rows (and K ≤ kKc, N ≤ kNc) are attention tiles: A is read in place.
constexpr int64_t kMaxDirectRows = 512;
constexpr int64_t kMinColumnsToPackA = 4 * kNr;

// Packing scratch, fixed per thread; reused by every call and never grows. [floats]
alignas(64) thread_local float packed_a[kMc * kKc];
alignas(64) thread_local float packed_b[kKc * kNc];

// How the micro-kernel finds op(A)[r, k]: at a[r * stride + k] (rows contiguous in k: op none) or
// at a[k * stride + r] (columns contiguous in r: op transpose, and packed strips).
enum class Layout { k_contiguous, rows_contiguous };

// C[0:MR, 0:cols] = alpha · Σ_k op(A)[r, k] · op(B)[k, 0:NV·kLanes] + beta · C, cols ≤ NV·kLanes.
// alpha and beta come by reference, read after the k loop: passed by value they arrive in vector
// registers, and with AVX2's 16 the two of them cost the 6 × 16 tile an accumulator, which GCC then
// kept on the stack (a store-to-load round trip on every k step: 45 % of the FMA peak on Zen 5).
// Row k of op(B) is NV·kLanes contiguous floats at b + k · b_row_stride; when not `b_full` only
// `cols` of them are valid and they are loaded masked, so nothing past them is read. NV = 1 serves
// a strip of at most kLanes columns (the tail of N = 40, 72, …) at half the work of NV = 2.
template <int MR, Layout layout, int NV>
void micro_kernel(int64_t kc, const float* a, int64_t a_stride, const float* b, int64_t b_row_stride,
                  bool b_full, int64_t cols, const float& alpha, const float& beta, float* C, int64_t ldc) {
  static_assert(NV == 1 || NV == 2);
  vec acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = vec{};
  // C is read and written only after the k loop; fetching its lines now hides the miss (in a large
  // product C's rows lie far apart and are not in any cache).
  if (beta != 0.0f)
    for (int r = 0; r < MR; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(C + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(C + r * ldc + NV * kLanes - 1), _MM_HINT_T0);
    }
  // Valid columns of each of the NV vectors.
  int64_t valid[NV];
  for (int v = 0; v < NV; ++v) valid[v] = std::clamp<int64_t>(cols - v * kLanes, 0, kLanes);
  const auto step = [&](int64_t k, const vec (&bk)[NV]) {
    for (int r = 0; r < MR; ++r) {
      const float ar = layout == Layout::k_contiguous ? a[r * a_stride + k] : a[k * a_stride + r];
      for (int v = 0; v < NV; ++v) acc[r][v] += ar * bk[v];
    }
  };
  vec bk[NV];
  if (b_full) {
    for (int64_t k = 0; k < kc; ++k, b += b_row_stride) {
      for (int v = 0; v < NV; ++v) bk[v] = load(b + v * kLanes);
      step(k, bk);
    }
  } else {
    for (int64_t k = 0; k < kc; ++k, b += b_row_stride) {
      for (int v = 0; v < NV; ++v) bk[v] = load_partial(b + v * kLanes, valid[v]);
      step(k, bk);
    }
  }
  for (int r = 0; r < MR; ++r, C += ldc)
    for (int v = 0; v < NV; ++v) {
      float* c = C + v * kLanes;
      if (cols == NV * kLanes) {
        store(c, alpha * acc[r][v] + (beta == 0.0f ? vec{} : beta * load(c)));
      } else if (valid[v] > 0) {
        store_partial(c, alpha * acc[r][v] + (beta == 0.0f ? vec{} : beta * load_partial(c, valid[v])), valid[v]);
      }
    }
}

using MicroKernel = void (*)(int64_t, const float*, int64_t, const float*, int64_t, bool, int64_t, const float&, const float&,
                             float*, int64_t);

template <Layout layout, int NV, int... MR>
constexpr auto make_kernel_table(std::integer_sequence<int, MR...>) {
  return std::array<MicroKernel, sizeof...(MR)>{&micro_kernel<MR + 1, layout, NV>...};
}
using KernelTable = std::array<MicroKernel, kMaxMr>;
// kernels[layout][NV - 1][rows - 1] handles a strip of `rows` rows and up to NV·kLanes columns.
constexpr std::array<std::array<KernelTable, 2>, 2> kernels = {{
    {make_kernel_table<Layout::k_contiguous, 1>(std::make_integer_sequence<int, kMaxMr>{}),
     make_kernel_table<Layout::k_contiguous, 2>(std::make_integer_sequence<int, kMaxMr>{})},
    {make_kernel_table<Layout::rows_contiguous, 1>(std::make_integer_sequence<int, kMaxMr>{}),
     make_kernel_table<Layout::rows_contiguous, 2>(std::make_integer_sequence<int, kMaxMr>{})},
}};

// Rows per strip when `m` rows are cut into the fewest strips of at most kMaxMr rows, as evenly as
// possible: 64 rows become 6 strips of 11 or 10 rather than 5 of 12 and one of 4, so every strip
// keeps enough independent accumulators to hide the FMA latency.
inline int64_t strip_rows(int64_t m) {
  const int64_t strips = (m + kMaxMr - 1) / kMaxMr;
  return (m + strips - 1) / strips;
}

// Rows per packed block of A when M rows are cut into the fewest blocks of at most kMc, as evenly
// as whole register tiles allow: M = 128 becomes 72 + 56 (AVX-512) or 66 + 62 (AVX2) rather than
// 120 + 8, whose 8-row block ran as strips too short to hide the FMA latency.
inline int64_t balanced_row_block(int64_t M) {
  const int64_t blocks = (M + kMc - 1) / kMc;
  const int64_t rows = (M + blocks - 1) / blocks;
  return std::min(kMc, (rows + kMaxMr - 1) / kMaxMr * kMaxMr);
}

// op(B)[k0 : k0+kc, j0 : j0+nc] into kNr-column strips, k-major: strip[k * kNr + c], zero-padded.
void pack_b(Op op, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc) {
  for (int64_t strip = 0; strip < nc; strip += kNr) {
    float* dst = packed_b + strip * kc;
    const int64_t cols = std::min(kNr, nc - strip);
    if (op == Op::none) {
      const float* src = B + k0 * ldb + j0 + strip;
      for (int64_t k = 0; k < kc; ++k, src += ldb, dst += kNr) {
        if (cols == kNr) {
          store(dst, load(src));
          store(dst + kLanes, load(src + kLanes));
        } else {
          store(dst, load_partial(src, std::min(cols, kLanes)));
          store(dst + kLanes, load_partial(src + kLanes, std::max<int64_t>(cols - kLanes, 0)));
        }
      }
      continue;
    }
    // op(B)[k, j] = B[j, k]: whole kLanes × kLanes blocks transposed in registers, the rest
    // (a partial strip or the last k's) element by element.
    const float* src = B + (j0 + strip) * ldb + k0;
    const int64_t full_k = cols == kNr ? kc / kLanes * kLanes : 0;
    for (int64_t k = 0; k < full_k; k += kLanes)
      for (int64_t c = 0; c < kNr; c += kLanes) simd::transpose_block(src + c * ldb + k, ldb, dst + k * kNr + c, kNr);
    for (int64_t k = full_k; k < kc; ++k)
      for (int64_t c = 0; c < kNr; ++c) dst[k * kNr + c] = c < cols ? src[c * ldb + k] : 0.0f;
  }
}

// op(A)[i0 : i0+mc, k0 : k0+kc] into strips of `rows` rows, k-major: strip[k * rows + r].
void pack_a(Op op, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t rows, int64_t k0, int64_t kc) {
  if (op == Op::transpose) {
    // op(A)[i, k] = A[k, i]: source row k holds all mc values of step k contiguously; read it once,
    // front to back, and deal it out to the strips (strip height ≤ kMaxMr ≤ kLanes floats).
    constexpr int64_t kRowsAhead = 8;  // rows lie lda apart, often in memory: ask for them early
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A + (k0 + k) * lda + i0;
      if (k + kRowsAhead < kc)
        for (int64_t i = 0; i < mc; i += 16)
          _mm_prefetch(reinterpret_cast<const char*>(src + kRowsAhead * lda + i), _MM_HINT_T0);
      for (int64_t strip = 0; strip < mc; strip += rows) {
        const int64_t strip_height = std::min(rows, mc - strip);
        float* dst = packed_a + strip * kc + k * strip_height;
        const vec column = strip + kLanes <= mc ? load(src + strip) : load_partial(src + strip, strip_height);
        // A whole-vector store spills past this k's strip_height floats into the next k's slots,
        // which that k then overwrites; only a store that would leave the strip is masked. (A masked
        // store is microcoded on AMD's cores: one per k and strip held the AVX2 path's transposed
        // products, standard's dV = Pᵀ·dO, at two thirds of OpenBLAS's rate.)
        if (k * strip_height + kLanes <= kc * strip_height)  // the whole vector ends inside the strip
          store(dst, column);
        else
          store_partial(dst, column, strip_height);
      }
    }
    return;
  }
  for (int64_t strip = 0; strip < mc; strip += rows) {
    float* dst = packed_a + strip * kc;
    const int64_t strip_height = std::min(rows, mc - strip);
    for (int64_t r = 0; r < strip_height; ++r) {
      const float* src = A + (i0 + strip + r) * lda + k0;
      for (int64_t k = 0; k < kc; ++k) dst[k * strip_height + r] = src[k];
    }
  }
}

// C[mc, nc] (+)= op(A)[mc, kc] · B-panel, over strips of rows and kNr columns. A is either packed
// (strips of `rows` rows, k-major) or in place with op(A)[r, k] at a[r * row_stride + k * k_stride].
void block_product(int64_t mc, int64_t nc, int64_t kc, float alpha, const float* A, int64_t a_row_stride,
                   int64_t a_k_stride, bool a_packed, const float* B, int64_t b_row_stride,
                   bool b_packed, float beta, float* C, int64_t ldc) {
  const int64_t rows = strip_rows(mc);
  const bool k_contiguous = !a_packed && a_k_stride == 1;
  const auto& layout_kernels = kernels[k_contiguous ? 0 : 1];
  for (int64_t js = 0; js < nc; js += kNr) {
    const int64_t cols = std::min(kNr, nc - js);
    const int vectors = cols <= kLanes ? 1 : 2;
    const KernelTable& kernel_for_rows = layout_kernels[vectors - 1];
    // A packed B strip is kNr wide with zero padding; an unpacked B row may end at `cols`.
    const float* b = b_packed ? B + js * kc : B + js;
    const bool b_full = b_packed || cols == vectors * kLanes;
    for (int64_t is = 0; is < mc; is += rows) {
      const int64_t height = std::min(rows, mc - is);
      const float* a = a_packed ? A + is * kc : A + is * a_row_stride;
      const int64_t a_stride = a_packed ? height : (k_contiguous ? a_row_stride : a_k_stride);
      kernel_for_rows[height - 1](kc, a, a_stride, b, b_row_stride, b_full, cols, alpha, beta, C + is * ldc + js,
                                  ldc);
    }
  }
}

}  // namespace

// Two paths. Small products (attention tiles) read A in place: the micro-kernel broadcasts op(A)'s
// elements from wherever they are, so only a transposed B is packed. Large products pack both
// operands into cache-sized panels, which avoids cache-set conflicts between rows that lie a
// power-of-two stride apart and makes every micro-kernel read sequential.
void gemm(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const int64_t a_row_stride = op_a == Op::none ? lda : 1;
  const int64_t a_k_stride = op_a == Op::none ? 1 : lda;
  const bool large = M > kMaxDirectRows || N > kNc || K > kKc;
  const int64_t row_block = large ? balanced_row_block(M) : M;
  // Packing a row-major A (a transposition) costs about as much as a k step per element; it pays off
  // only when the strip is reused across many column strips. A transposed A packs by plain copies and
  // would otherwise be read a whole cache line per k step.
  const bool pack_a_block = large && (N >= kMinColumnsToPackA || op_a == Op::transpose);
  for (int64_t j0 = 0; j0 < N; j0 += kNc) {
    const int64_t nc = std::min(kNc, N - j0);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t kc = std::min(kKc, K - k0);
      const float beta_block = k0 == 0 ? beta : 1.0f;  // later K blocks accumulate
      const bool pack_b_panel = large || op_b == Op::transpose;
      if (pack_b_panel) pack_b(op_b, B, ldb, k0, kc, j0, nc);
      const float* b_panel = pack_b_panel ? packed_b : B + k0 * ldb + j0;
      const int64_t b_row_stride = pack_b_panel ? kNr : ldb;
      for (int64_t i0 = 0; i0 < M; i0 += row_block) {
        const int64_t mc = std::min(row_block, M - i0);
        const float* a_block = A + i0 * a_row_stride + k0 * a_k_stride;
        if (pack_a_block) {
          pack_a(op_a, A, lda, i0, mc, strip_rows(mc), k0, kc);
          a_block = packed_a;
        }
        block_product(mc, nc, kc, alpha, a_block, a_row_stride, a_k_stride, pack_a_block, b_panel, b_row_stride,
                      pack_b_panel, beta_block, C + i0 * ldc + j0, ldc);
      }
    }
  }
}

}  // namespace flashbench::cpu::FLASHBENCH_CPU_ISA

#include "epilogue.hpp"
