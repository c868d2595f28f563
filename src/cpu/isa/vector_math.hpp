#pragma once
// SIMD basics and the vectorised math the softmax loops need: one register of fp32 lanes (16 with
// AVX-512, 8 with AVX2 and on the scalar path, where the compiler lowers each vector to two SSE
// registers), a fast exp with a stated error bound, and row helpers (max, exp-and-sum of a scaled and
// shifted row, scale). Header-only so that the attention kernels' loops inline them; compiled once per
// ISA: include it after src/cpu/isa/prologue.hpp, with <immintrin.h>, <algorithm>, <cstdint>,
// <cstring> and <limits> included before the prologue.
#if !defined(FLASHBENCH_CPU_ISA_LEVEL)
#error "vector_math.hpp is ISA code: include it after src/cpu/isa/prologue.hpp"
#endif

namespace flashbench::cpu::FLASHBENCH_CPU_ISA::simd {

#if FLASHBENCH_CPU_ISA_LEVEL == 3
inline constexpr int64_t kLanes = 16;
#else
inline constexpr int64_t kLanes = 8;
#endif
using vec = float __attribute__((vector_size(kLanes * sizeof(float))));
using ivec = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline vec broadcast(float x) { return vec{} + x; }
inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof(vec));
  return v;
}
inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof(vec)); }

// The first `count` (0 ≤ count ≤ kLanes) lanes of p; the other lanes read as `fill` and their memory is
// never touched, so a row may end anywhere.
// A whole vector (count == kLanes) takes a plain load or store: AMD's cores run masked stores as
// microcode (AVX2's vmaskmovps, and AVX-512's masked stores on Zen 4), and the tile loops pass
// kLanes on all but a row's last vector.
inline vec load_partial(const float* p, int64_t count, float fill = 0.0f) {
  if (count == kLanes) return load(p);
#if FLASHBENCH_CPU_ISA_LEVEL == 3
  return vec(_mm512_mask_loadu_ps(__m512(broadcast(fill)), __mmask16((1u << count) - 1u), p));
#elif FLASHBENCH_CPU_ISA_LEVEL == 2
  const __m256i in_range = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return vec(_mm256_blendv_ps(__m256(broadcast(fill)), _mm256_maskload_ps(p, in_range), _mm256_castsi256_ps(in_range)));
#else
  vec v = broadcast(fill);
  for (int64_t i = 0; i < count; ++i) v[i] = p[i];
  return v;
#endif
}
inline void store_partial(float* p, vec v, int64_t count) {
  if (count == kLanes) return store(p, v);
#if FLASHBENCH_CPU_ISA_LEVEL == 3
  _mm512_mask_storeu_ps(p, __mmask16((1u << count) - 1u), __m512(v));
#elif FLASHBENCH_CPU_ISA_LEVEL == 2
  const __m256i in_range = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_maskstore_ps(p, in_range, __m256(v));
#else
  for (int64_t i = 0; i < count; ++i) p[i] = v[i];
#endif
}

inline vec max(vec a, vec b) { return a > b ? a : b; }
inline float reduce_max(vec v) {
  float m = v[0];
  for (int64_t i = 1; i < kLanes; ++i) m = std::max(m, v[i]);
  return m;
}
inline float reduce_sum(vec v) {
  float s = 0.0f;
  for (int64_t i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// exp(x) per lane, after Cephes' expf: x = n·ln2 + r with n = round(x·log2 e), |r| ≤ ln2/2,
// exp(r) by its degree-7 minimax polynomial, times 2ⁿ. Error bound (tests/cpu/vector_math_test.cpp
// checks it against double exp over [-104, 88.7] and the limits): relative ≤ 2.5e-7 (about 2 ulp)
// for x ≥ kExpFlushBelow; below that the result is exactly 0 (absolute error < 2⁻¹²⁴, the true value
// being at most a few FLT_MIN), so no lane ever makes a subnormal: on x86 an instruction that produces
// one costs a microcode assist of ~100 cycles, which masked (-inf) scores would hit in every causal
// tile. exp(-inf) = 0, exp(0) = 1 exactly, x > 88.72 gives +inf, NaN stays NaN.
inline constexpr float kExpFlushBelow = -86.5f;  // exp(-86.5) ≈ 2.7e-38: n = -125, every 2ⁿ·p normal

inline vec exp(vec x) {
  const vec flush_below = broadcast(kExpFlushBelow), highest = broadcast(89.0f);
  const vec original = x;
  x = x < flush_below ? flush_below : x;
  x = x > highest ? highest : x;
  // Round to nearest by the 1.5·2²³ trick: exact for |x·log2 e| < 2²², here ≤ 129.
  const float round_shift = 12582912.0f;
  const vec n = (x * 1.44269504088896341f + round_shift) - round_shift;
  // ln 2 in two parts, the first exact in few bits, so n·ln2_hi is exact and r keeps its precision.
  vec r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  vec p = broadcast(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
#if FLASHBENCH_CPU_ISA_LEVEL == 3
  // p · 2ⁿ, overflowing to inf. (The masked form: GCC 12's unmasked intrinsic trips
  // -Wmaybe-uninitialized.)
  const vec result = vec(_mm512_mask_scalef_ps(__m512(p), __mmask16(0xFFFF), __m512(p), __m512(n)));
  return original < flush_below ? vec{} : result;
#else
  // p · 2^(n/2) · 2^(n − n/2): both factors are normal floats for every n in [-125, 129], and the
  // product overflows to inf.
  const ivec n_int = __builtin_convertvector(n, ivec);
  const ivec half = n_int >> 1;
  const ivec bits_first = (half + 127) << 23, bits_second = (n_int - half + 127) << 23;
  vec first, second;
  std::memcpy(&first, &bits_first, sizeof(vec));
  std::memcpy(&second, &bits_second, sizeof(vec));
  const vec result = p * first * second;
  return original < flush_below ? vec{} : result;
#endif
}

// dst[c · ld_dst + r] = factor · src[r · ld_src + c] for one kLanes × kLanes block, in registers:
// log2(kLanes) rounds of zipping row i with row i + kLanes/2 rotate each element's (row, column)
// address by one bit, so after them row and column have traded places. 64 two-source permutes for
// 16 × 16 floats instead of 256 scalar loads and stores.
inline void transpose_block(const float* src, int64_t ld_src, float* dst, int64_t ld_dst, float factor = 1.0f) {
  constexpr int64_t half = kLanes / 2;
  ivec low, high;  // lanes of the first (0..kLanes-1) and second (kLanes..2·kLanes-1) source
  for (int64_t i = 0; i < half; ++i) {
    low[2 * i] = int32_t(i);
    low[2 * i + 1] = int32_t(i + kLanes);
    high[2 * i] = int32_t(i + half);
    high[2 * i + 1] = int32_t(i + half + kLanes);
  }
  vec rows[kLanes], zipped[kLanes];
  for (int64_t r = 0; r < kLanes; ++r) rows[r] = load(src + r * ld_src) * factor;
  for (int64_t round = 1; round < kLanes; round *= 2) {
    for (int64_t i = 0; i < half; ++i) {
      zipped[2 * i] = __builtin_shuffle(rows[i], rows[i + half], low);
      zipped[2 * i + 1] = __builtin_shuffle(rows[i], rows[i + half], high);
    }
    for (int64_t r = 0; r < kLanes; ++r) rows[r] = zipped[r];
  }
  for (int64_t c = 0; c < kLanes; ++c) store(dst + c * ld_dst, rows[c]);
}

}  // namespace flashbench::cpu::FLASHBENCH_CPU_ISA::simd

namespace flashbench::cpu::FLASHBENCH_CPU_ISA {

// max_j x[j] over x[0:n]; -inf when n == 0.
inline float row_max(const float* x, int64_t n) {
  using namespace simd;
  const float lowest = -std::numeric_limits<float>::infinity();
  vec m = broadcast(lowest);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) m = max(m, load(x + j));
  if (j < n) m = max(m, load_partial(x + j, n - j, lowest));
  return reduce_max(m);
}

// x[j] = exp(scale · x[j] − shift) in place over x[0:n], scale > 0; returns Σ_j of the new x[j].
// With shift = scale · max_j x[j] this is the softmax numerator of a row of scores. A row that is all
// -inf (fully masked) needs a finite shift: -inf - (-inf) is NaN.
inline float exp_scaled_shifted_sum(float* x, int64_t n, float scale, float shift) {
  using namespace simd;
  vec sum{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const vec e = exp(load(x + j) * scale - shift);
    store(x + j, e);
    sum += e;
  }
  if (j < n) {
    // Lanes past n read -inf, so they add exp(-inf) = 0 to the sum.
    const vec e = exp(load_partial(x + j, n - j, -std::numeric_limits<float>::infinity()) * scale - shift);
    store_partial(x + j, e, n - j);
    sum += e;
  }
  return reduce_sum(sum);
}

// x[j] *= factor over x[0:n].
inline void scale_row(float* x, int64_t n, float factor) {
  using namespace simd;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) store(x + j, load(x + j) * factor);
  if (j < n) store_partial(x + j, load_partial(x + j, n - j) * factor, n - j);
}

// Σ_j a[j]·b[j] over [0:n].
inline float dot(const float* a, const float* b, int64_t n) {
  using namespace simd;
  vec sum{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) sum += load(a + j) * load(b + j);
  if (j < n) sum += load_partial(a + j, n - j) * load_partial(b + j, n - j);
  return reduce_sum(sum);
}

// y[j] = exp(x[j]) over [0:n] (y may be x).
inline void exp_array(const float* x, float* y, int64_t n) {
  using namespace simd;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) store(y + j, exp(load(x + j)));
  if (j < n) store_partial(y + j, exp(load_partial(x + j, n - j)), n - j);
}

}  // namespace flashbench::cpu::FLASHBENCH_CPU_ISA
