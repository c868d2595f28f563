#include "flashbench/core/storage.hpp"

#include <algorithm>
#include <cmath>

namespace flashbench {

double round_to(Dtype dtype, double x) {
  if (dtype == Dtype::fp32) return double(float(x));
  if (x == 0 || !std::isfinite(x)) return x;
  const int significant_bits = dtype == Dtype::bf16 ? 8 : 11;
  const int min_exponent = dtype == Dtype::bf16 ? -126 : -14;  // below it, fixed (subnormal) spacing
  const int exponent = std::max(std::ilogb(x), min_exponent);
  const double quantum = std::ldexp(1.0, exponent - (significant_bits - 1));
  const double rounded = std::nearbyint(x / quantum) * quantum;
  if (dtype == Dtype::fp16 && std::fabs(rounded) > 65504.0) return std::copysign(INFINITY, x);
  return rounded;
}

}  // namespace flashbench
