#include "flashbench/core/variant.hpp"

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"

namespace flashbench {

namespace {

// The extent of a kept tensor, and the format it is stored in.
enum class Extent { scores, rows, qkv, expanded_kv };  // [B,H,N,N_k], [B,H,N], [B,H,N,d], [B,H,N_k,d]
enum class Format { storage, fp32, byte };  // the problem's dtype; row statistics stay fp32; a mask is 1 byte

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
  // Whether its backward reads the attention inputs as forward saw them. Then naive GQA (expand_kv)
  // keeps the repeated K and V, as autograd saves an operation's inputs; checkpoint repeats them again.
  bool keeps_inputs = true;
  // Whether it keeps what frameworks keep for dropout (the 1-byte mask Z and the dropped P̃): v2
  // regenerates Z in backward from the generator, checkpoint redraws it as it recomputes P.
  bool keeps_dropout = false;
};

// What dropout adds where the variant keeps it.
const std::vector<KeptSpec> kDropout = {{"mask", Extent::scores, Format::byte}, {"Pd", Extent::scores, Format::storage}};

// What naive GQA adds: K and V repeated to H heads.
const std::vector<KeptSpec> kExpandedKV = {{"Kx", Extent::expanded_kv, Format::storage},
                                           {"Vx", Extent::expanded_kv, Format::storage}};

const std::vector<VariantSpec>& specs() {
  static const std::vector<VariantSpec> table = {
      {Variant::standard, "standard", "nothing", {{"P", Extent::scores, Format::storage}}, true, true},
      {Variant::v1, "v1", "P = exp(S - m) / l",
       {{"S", Extent::scores, Format::storage}, {"m", Extent::rows, Format::fp32}, {"l", Extent::rows, Format::fp32}},
       true, true},
      // v2's O is the layer output, kept alive until this layer's backward.
      {Variant::v2, "v2", "S and P per tile; D = rowsum(dO * O)",
       {{"O", Extent::qkv, Format::storage}, {"LSE", Extent::rows, Format::fp32}}},
      {Variant::checkpoint, "checkpoint", "P as the standard forward computes it (not O)", {}, false},
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
  for (const VariantSpec& spec : specs())
    if (spec.name == name) return spec.variant;
  throw UsageError(fmt::format("unknown variant '{}' (expected {} or all)", name, variant_names()));
}

std::string variant_names(std::string_view last_separator) {
  std::vector<std::string> names;
  for (const VariantSpec& spec : specs()) names.emplace_back(spec.name);
  return listed(names, last_separator);
}

std::string_view recomputes(Variant variant) { return spec_of(variant).recomputes; }

std::vector<KeptTensor> kept_per_layer(Variant variant, const Problem& p) {
  std::vector<KeptTensor> kept;
  auto add = [&](const KeptSpec& tensor) {
    const int64_t elements = tensor.extent == Extent::scores        ? p.score_elements()
                             : tensor.extent == Extent::rows        ? p.row_elements()
                             : tensor.extent == Extent::expanded_kv ? p.expanded_kv_elements()
                                                                    : p.q_elements();
    const int bytes = tensor.format == Format::storage ? element_bytes(p.dtype) : tensor.format == Format::fp32 ? 4 : 1;
    kept.push_back({tensor.name, elements, bytes, tensor.extent == Extent::scores});
  };
  const VariantSpec& spec = spec_of(variant);
  for (const KeptSpec& tensor : spec.keeps) add(tensor);
  if (p.dropout > 0 && spec.keeps_dropout)
    for (const KeptSpec& tensor : kDropout) add(tensor);
  if (p.repeats_kv() && spec.keeps_inputs)
    for (const KeptSpec& tensor : kExpandedKV) add(tensor);
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
