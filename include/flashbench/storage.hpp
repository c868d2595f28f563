#pragma once
// Storage formats on the host: rounding a value to bf16 / fp16 and back, one element at a time.
// The CPU device stores 16-bit tensors with these; the reference emulates storage precision with them.
#include <bit>
#include <cstdint>

#include "flashbench/problem.hpp"

namespace flashbench {

using Half = uint16_t;  // the bits of one bf16 or fp16 number

// Round to nearest even (fp16: saturating to ±inf beyond 65504, as IEEE rounding does); NaN stays NaN.
// Inline: the CPU's conversion loops call them per element.
inline Half round_to_half(Dtype dtype, float x) {
  if (dtype == Dtype::bf16) {
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return Half((bits >> 16) | 0x40);  // NaN stays a quiet NaN
    const uint32_t round_bit_and_ties = 0x7fffu + ((bits >> 16) & 1u);      // round to nearest even
    return Half((bits + round_bit_and_ties) >> 16);
  }
  return std::bit_cast<Half>(static_cast<_Float16>(x));
}
inline float widen_half(Dtype dtype, Half h) {
  if (dtype == Dtype::bf16) return std::bit_cast<float>(uint32_t(h) << 16);
  return static_cast<float>(std::bit_cast<_Float16>(h));
}

// x rounded to the nearest value of `dtype` (fp32 included), in double.
double round_to(Dtype dtype, double x);

}  // namespace flashbench
