#include "flashbench/variant.hpp"

#include <fmt/format.h>

#include "flashbench/errors.hpp"

namespace flashbench {

namespace {

// The extent of a kept tensor, and the format it is stored in.
enum class Extent { scores, rows, qkv };   // [B,H,N,N], [B,H,N], [B,H,N,d]
enum class Format { storage, fp32 };       // the problem's dtype; row statistics stay fp32 in every dtype

struct KeptSpec {
  std::string_view name;
  Extent extent;
  Format format;
};

// Every variant, once: its name, what its backward recomputes, and what one layer keeps between its
// forward and its backward beyond its input. The model, the layer stack's allocations and the help
// text all read this table; adding a variant is an entry here (and an implementation per device).
struct VariantSpec {
  Variant variant;
  std::string_view name;
  std::string_view recomputes;
  std::vector<KeptSpec> keeps;
};

const std::vector<VariantSpec>& specs() {
  static const std::vector<VariantSpec> table = {
      {Variant::standard, "standard", "nothing", {{"P", Extent::scores, Format::storage}}},
      {Variant::v1, "v1", "P = exp(S - m) / l",
       {{"S", Extent::scores, Format::storage}, {"m", Extent::rows, Format::fp32}, {"l", Extent::rows, Format::fp32}}},
      // v2's O is the layer output, kept alive until this layer's backward.
      {Variant::v2, "v2", "S and P per tile; D = rowsum(dO * O)",
       {{"O", Extent::qkv, Format::storage}, {"LSE", Extent::rows, Format::fp32}}},
      {Variant::checkpoint, "checkpoint", "the whole standard forward of the layer", {}},
  };
  return table;
}

const VariantSpec& spec_of(Variant variant) {
  for (const VariantSpec& spec : specs())
    if (spec.variant == variant) return spec;
  throw RuntimeFailure("internal error: a variant without a spec entry");
}

}  // namespace

std::string_view to_string(Variant variant) { return spec_of(variant).name; }

Variant parse_variant(std::string_view name) {
  std::string known;
  for (const VariantSpec& spec : specs()) {
    if (spec.name == name) return spec.variant;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", spec.name);
  }
  throw UsageError(fmt::format("unknown variant '{}' (expected {} or all)", name, known));
}

std::string_view recomputes(Variant variant) { return spec_of(variant).recomputes; }

std::vector<KeptTensor> kept_per_layer(Variant variant, const Problem& p) {
  std::vector<KeptTensor> kept;
  for (const KeptSpec& tensor : spec_of(variant).keeps) {
    const int64_t elements = tensor.extent == Extent::scores ? p.score_elements()
                             : tensor.extent == Extent::rows ? p.row_elements()
                                                             : p.qkv_elements();
    kept.push_back({tensor.name, elements, tensor.format == Format::storage ? element_bytes(p.dtype) : 4,
                    tensor.extent == Extent::scores});
  }
  return kept;
}

int64_t kept_bytes_per_layer(Variant variant, const Problem& problem) {
  int64_t total = 0;
  for (const KeptTensor& t : kept_per_layer(variant, problem)) total += t.bytes();
  return total;
}

bool keeps_layer_output(Variant variant) {
  for (const KeptSpec& tensor : spec_of(variant).keeps)
    if (tensor.name == "O") return true;
  return false;
}

}  // namespace flashbench
