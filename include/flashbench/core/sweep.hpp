#pragma once
// Sweeps: axis values from comma lists and ranges, JSON sweep files in configs/, the cartesian
// product of the axes, and command-line values overriding a file.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/core/problem.hpp"
#include "flashbench/core/statistics.hpp"
#include "flashbench/core/variant.hpp"

namespace flashbench {

// Positive integers from "4096", "1,2,3", a geometric range "512:8192:x2" (512, 1024, ..., 8192)
// or an arithmetic one "64:256:+64" (64, 128, 192, 256); items combine: "256,1024:4096:x2".
// A range stops at the last value not above its end. Throws UsageError naming `flag` and the bad
// token on zero, negative, non-numeric or empty items, a step that does not grow, or more than
// kMaxListLength values.
std::vector<int64_t> parse_int_list(std::string_view text, std::string_view flag);
inline constexpr size_t kMaxListLength = 4096;

// "true", "false", "1", "0", "yes", "no", or "both" (false, true), comma-separated.
std::vector<bool> parse_bool_list(std::string_view text, std::string_view flag);

// Probabilities in [0, kMaxDropout] from "0.1" or "0,0.1,0.2".
std::vector<double> parse_probability_list(std::string_view text, std::string_view flag);

// "all" or a comma list of variant names, in the order given.
std::vector<Variant> parse_variant_list(std::string_view text, std::string_view flag);
std::vector<std::string> variant_names(const std::vector<Variant>& variants);

struct SweepSpec {
  std::string description;
  std::vector<int64_t> batch = {1};
  // Tokens per configuration T = B·N (query rows), as GPU results are compared (B·N = 16K): when
  // given, it replaces `batch` and each configuration takes B = T / N. A T that N does not divide is
  // a UsageError from expand(), before anything runs.
  std::vector<int64_t> tokens;
  std::vector<int64_t> heads = {8};
  std::vector<int64_t> seq = {1024};      // N (N_q)
  std::vector<int64_t> seq_k;             // N_k; empty: N_k = N for each N
  std::vector<int64_t> kv_heads;          // G; empty: G = H
  std::vector<bool> expand_kv = {false};  // naive GQA (only configurations with G < H repeat anything)
  std::vector<double> dropout = {0.0};
  std::vector<int64_t> head_dim = {64};
  std::vector<int64_t> layers = {1};
  std::vector<bool> causal = {false};
  std::vector<Dtype> dtype = {Dtype::fp32};
  std::vector<Variant> variants = {kAllVariants.begin(), kAllVariants.end()};
  std::vector<std::string> implementations;  // by name; when given, they replace `variants`
  std::string backend = "cpu";
  SamplingPolicy sampling;
  int threads = 0;  // 0 = OpenMP's default
};

// Every combination of the axes, in a fixed order: dtype, causal, batch (or tokens), heads, kv_heads, head_dim,
// layers, dropout, expand_kv (false, then true where G < H), seq_k outermost, then seq innermost, so
// one scaling curve in N runs consecutively. Variants are not an
// axis of the product: a backend runs all of them on each problem. Each problem is validated; more
// than kMaxConfigurations of them is a UsageError.
std::vector<Problem> expand(const SweepSpec& spec);
inline constexpr uint64_t kMaxConfigurations = 65536;

// A JSON object with optional keys: description, batch or tokens (not both), heads, kv_heads, seq (or seq_q), seq_k,
// head_dim, layers (an integer, a list of integers, or a list/range string as parse_int_list takes),
// causal and expand_kv (bool, "both" or list of bools), dropout (a number or a list), dtype (name or list), variants ("all" or list), impls (list of implementation names),
// backend, threads, and sampling {warmup,
// warmup_ms, min_samples, max_samples, max_noise, max_time_s, throttle_threshold}. Unknown keys are usage errors.
SweepSpec parse_sweep_json(std::string_view text, std::string_view source_name);
SweepSpec load_sweep_file(const std::string& path);  // throws UsageError when unreadable or invalid
// The inverse: a sweep file that parse_sweep_json reads back to the same spec (every key written,
// the axes as lists), for recording a resolved sweep in a results file and hashing it.
nlohmann::ordered_json sweep_to_json(const SweepSpec& spec);

// The command line's sweep flags as given (empty = not given); applied over a spec loaded from
// --config (or the defaults), so flags override the file.
struct SweepOverrides {
  std::optional<std::string> batch, heads, seq, head_dim, layers;  // parse_int_list syntax
  std::optional<std::string> tokens;  // parse_int_list syntax; excludes --batch, replaces a file's batch
  // --seq sets N and N_k = N (a file's seq_k dropped); --seq-q sets N alone, --seq-k N_k alone.
  std::optional<std::string> seq_q, seq_k, kv_heads;               // parse_int_list syntax
  std::optional<std::string> expand_kv;                            // parse_bool_list syntax
  std::optional<std::string> dropout;                              // parse_probability_list syntax
  std::optional<std::string> causal;                               // parse_bool_list syntax
  std::optional<std::string> dtype;                                // comma list of names
  std::optional<std::string> variants;                             // "all" or comma list
  std::optional<std::string> implementations;                      // comma list of names
  std::optional<std::string> backend;
  std::optional<int> threads;
  std::optional<int> warmup, min_samples, max_samples;
  std::optional<double> warmup_ms, max_noise, max_time_s, throttle_threshold;
};
void apply_overrides(SweepSpec& spec, const SweepOverrides& overrides);

// Loads `config_path` when given, applies the overrides, validates the sampling policy.
SweepSpec resolve_sweep(const std::optional<std::string>& config_path, const SweepOverrides& overrides);

}  // namespace flashbench
