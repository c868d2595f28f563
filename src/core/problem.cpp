#include "flashbench/problem.hpp"

#include <cmath>

#include <fmt/format.h>

#include "flashbench/errors.hpp"

namespace flashbench {

std::string_view to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return "fp32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
  }
  return "?";
}

Dtype parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32") return Dtype::fp32;
  if (name == "bf16" || name == "bfloat16") return Dtype::bf16;
  if (name == "fp16" || name == "float16") return Dtype::fp16;
  throw UsageError(fmt::format("unknown dtype '{}' (expected fp32, bf16 or fp16)", name));
}

int element_bytes(Dtype dtype) { return dtype == Dtype::fp32 ? 4 : 2; }

float Problem::scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

double Problem::forward_flop() const {
  const double per_layer = 4.0 * double(batch) * double(heads) * double(seq) * double(seq) * double(head_dim);
  return per_layer * double(layers) * (causal ? 0.5 : 1.0);
}

double Problem::backward_flop() const { return 2.5 * forward_flop(); }

double Problem::rough_upper_bound_bytes() const {
  const double per_layer = double(batch) * double(heads) * double(seq) * (double(seq) + double(head_dim) + 8.0) * 8.0;
  return per_layer * (double(layers) + 3.0);
}

std::string Problem::describe() const {
  return fmt::format("B={} H={} N={} d={} L={}{} {}", batch, heads, seq, head_dim, layers,
                     causal ? " causal" : "", to_string(dtype));
}

namespace {
void check_axis(std::string_view flag, int64_t value, int64_t max_value) {
  if (value < 1) throw UsageError(fmt::format("{} must be at least 1 (got {})", flag, value));
  if (value > max_value)
    throw UsageError(fmt::format("{} {} is larger than the limit {}", flag, value, max_value));
}
}  // namespace

void validate(const Problem& problem) {
  check_axis("--batch", problem.batch, kMaxBatchOrHeads);
  check_axis("--heads", problem.heads, kMaxBatchOrHeads);
  check_axis("--seq", problem.seq, kMaxSeq);
  check_axis("--head-dim", problem.head_dim, kMaxHeadDim);
  check_axis("--layers", problem.layers, kMaxLayers);
  if (problem.rough_upper_bound_bytes() > kMaxProblemBytes)
    throw UsageError(fmt::format("{} is too large: its tensors would hold about {:.2g} bytes, more than 64-bit "
                                 "counts allow", problem.describe(), problem.rough_upper_bound_bytes()));
}

}  // namespace flashbench
