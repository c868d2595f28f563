#pragma once
// The variants, and the one statement of what each keeps from forward for backward (the table in
// variant.cpp). The layer stack allocates exactly these tensors and the analytic model counts
// exactly these. A new variant is an enumerator here and an entry in that table, then one
// implementation per device (or `unsupported`).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashbench/core/problem.hpp"

namespace flashbench {

enum class Variant { standard, v1, v2, checkpoint };

inline constexpr std::array<Variant, 4> kAllVariants = {Variant::standard, Variant::v1, Variant::v2,
                                                        Variant::checkpoint};

std::string_view to_string(Variant variant);
Variant parse_variant(std::string_view name);  // throws UsageError on an unknown name
// Every variant's name in order, joined for help text: "standard, v1, v2, checkpoint", or with
// last_separator " or " "standard, v1, v2 or checkpoint".
std::string variant_names(std::string_view last_separator = ", ");
std::string_view recomputes(Variant variant);   // one line, for help and tables

// One tensor a layer keeps between its forward and its backward.
struct KeptTensor {
  std::string_view name;  // "P", "S", "m", "l", "O", "LSE"
  int64_t elements;
  int element_bytes;      // [bytes]
  bool spans_keys = false; // an [B,H,N,N] tensor: its last axis runs over all N keys, so a device
                           // that holds N/P queries of a split sequence still keeps N columns
  int64_t bytes() const { return elements * element_bytes; }
};

// What one layer of `variant` keeps for backward, beyond its input X_i (which every variant keeps).
// N×N_k tensors and O use the storage dtype; row statistics are always fp32.
//   standard:   P [B,H,N,N_k]
//   v1:         S [B,H,N,N_k], m [B,H,N], l [B,H,N]
//   v2:         O [B,H,N,d] (the layer output, kept alive until this layer's backward), LSE [B,H,N]
//   checkpoint: nothing
// With dropout (p > 0) standard and v1 also keep the mask Z [B,H,N,N_k] (1 byte) and the dropped
// P̃ = P ∘ Z/(1 − p) [B,H,N,N_k] (storage dtype), as frameworks do (the 5·a·s²·b of Korthikanti et
// al.'s layer: P 2 bytes, Z 1, P̃ 2 in 16 bits); v2 regenerates Z in backward, checkpoint redraws it.
// With naive GQA (problem.repeats_kv()) every variant but checkpoint also keeps the repeated
// Kx, Vx [B,H,N_k,d] (storage dtype), as autograd saves an operation's inputs.
std::vector<KeptTensor> kept_per_layer(Variant variant, const Problem& problem);
int64_t kept_bytes_per_layer(Variant variant, const Problem& problem);  // [bytes]

// Whether the variant keeps its layer output O itself (v2 does: its backward reads it for
// D = rowsum(dO ∘ O)). Then the output is tagged `kept` and freed after that layer's backward, not
// the next layer's.
bool keeps_layer_output(Variant variant);

}  // namespace flashbench
