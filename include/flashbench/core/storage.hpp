#pragma once
// Storage formats on the host: rounding a value to bf16 / fp16 and back, one element at a time.
// The CPU device stores 16-bit tensors with these; the reference emulates storage precision with them.
#include <bit>
#include <cmath>
#include <cstdint>

#include "flashbench/core/problem.hpp"

// GCC 12 has _Float16 on x86-64 (converted by F16C where -march has it); clang before 15 has not.
#if defined(__FLT16_MANT_DIG__)
#define FLASHBENCH_HAVE_FLOAT16 1
#endif

namespace flashbench {

using Half = uint16_t;  // the bits of one bf16 or fp16 number

// fp16 by integer arithmetic, for compilers without _Float16 on the host (clang 14 on x86, which the
// fuzzing build uses); the same results bit for bit (tests/core/storage_test.cpp holds them to it).
inline Half fp16_from_float_portable(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const Half sign = Half((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return Half(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  // a quiet NaN
  if (magnitude >= 0x477ff000u) return Half(sign | 0x7c00u);  // 65520 and up round to inf
  if (magnitude < 0x38800000u) {                               // below 2^-14: a subnormal fp16
    // Multiplying by 2^24 is exact; nearbyint rounds to nearest even (the default mode).
    return Half(sign | Half(std::nearbyint(std::bit_cast<float>(magnitude) * 0x1p24f)));
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a carry out of
  // the mantissa moves into the exponent, as it should.
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return Half(sign | ((rounded - (112u << 23)) >> 13));
}
inline float fp16_to_float_portable(Half h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = float(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Round to nearest even (fp16: saturating to ±inf beyond 65504, as IEEE rounding does); NaN stays NaN.
// Inline: the CPU's conversion loops call them per element.
inline Half round_to_half(Dtype dtype, float x) {
  if (dtype == Dtype::bf16) {
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return Half((bits >> 16) | 0x40);  // NaN stays a quiet NaN
    const uint32_t round_bit_and_ties = 0x7fffu + ((bits >> 16) & 1u);      // round to nearest even
    return Half((bits + round_bit_and_ties) >> 16);
  }
#ifdef FLASHBENCH_HAVE_FLOAT16
  return std::bit_cast<Half>(static_cast<_Float16>(x));
#else
  return fp16_from_float_portable(x);
#endif
}
inline float widen_half(Dtype dtype, Half h) {
  if (dtype == Dtype::bf16) return std::bit_cast<float>(uint32_t(h) << 16);
#ifdef FLASHBENCH_HAVE_FLOAT16
  return static_cast<float>(std::bit_cast<_Float16>(h));
#else
  return fp16_to_float_portable(h);
#endif
}

// x rounded to the nearest value of `dtype` (fp32 included), in double.
double round_to(Dtype dtype, double x);

}  // namespace flashbench
