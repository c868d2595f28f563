#include "flashbench/variant.hpp"

#include <fmt/format.h>

#include "flashbench/errors.hpp"

namespace flashbench {

std::string_view to_string(Variant variant) {
  switch (variant) {
    case Variant::standard: return "standard";
    case Variant::v1: return "v1";
    case Variant::v2: return "v2";
    case Variant::checkpoint: return "checkpoint";
  }
  return "?";
}

Variant parse_variant(std::string_view name) {
  for (Variant v : kAllVariants)
    if (to_string(v) == name) return v;
  throw UsageError(fmt::format("unknown variant '{}' (expected standard, v1, v2, checkpoint or all)", name));
}

std::string_view recomputes(Variant variant) {
  switch (variant) {
    case Variant::standard: return "nothing";
    case Variant::v1: return "P = exp(S - m) / l";
    case Variant::v2: return "S and P per tile; D = rowsum(dO * O)";
    case Variant::checkpoint: return "the whole standard forward of the layer";
  }
  return "?";
}

std::vector<KeptTensor> kept_per_layer(Variant variant, const Problem& p) {
  const int storage = element_bytes(p.dtype);
  constexpr int kStatBytes = 4;  // row statistics stay fp32 in every dtype
  switch (variant) {
    case Variant::standard: return {{"P", p.score_elements(), storage}};
    case Variant::v1:
      return {{"S", p.score_elements(), storage}, {"m", p.row_elements(), kStatBytes},
              {"l", p.row_elements(), kStatBytes}};
    case Variant::v2: return {{"O", p.qkv_elements(), storage}, {"LSE", p.row_elements(), kStatBytes}};
    case Variant::checkpoint: return {};
  }
  return {};
}

int64_t kept_bytes_per_layer(Variant variant, const Problem& problem) {
  int64_t total = 0;
  for (const KeptTensor& t : kept_per_layer(variant, problem)) total += t.bytes();
  return total;
}

bool backward_reads_output(Variant variant) { return variant == Variant::v2; }

}  // namespace flashbench
