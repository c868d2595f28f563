#include "flashbench/core/sweep.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/input_file.hpp"
#include "flashbench/core/json_integer.hpp"

namespace flashbench {

namespace {

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    parts.push_back(trim(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

[[noreturn]] void bad_token(std::string_view flag, std::string_view token, std::string_view why) {
  throw UsageError(fmt::format("{}: '{}' {}", flag, token, why));
}

// A positive integer, the whole token.
int64_t parse_positive(std::string_view token, std::string_view flag, std::string_view item) {
  int64_t value = 0;
  const char* end = token.data() + token.size();
  const auto [stop, error] = std::from_chars(token.data(), end, value);
  if (token.empty()) bad_token(flag, item, "has an empty value");
  if (error == std::errc::result_out_of_range) bad_token(flag, item, "is too large");
  if (error != std::errc() || stop != end) bad_token(flag, item, "is not an integer");
  if (value <= 0) bad_token(flag, item, "must be positive");
  return value;
}

void append_range(std::string_view item, std::string_view flag, std::vector<int64_t>& values) {
  const std::vector<std::string_view> parts = split(item, ':');
  if (parts.size() != 3) bad_token(flag, item, "is not a range START:END:xFACTOR or START:END:+STEP");
  const int64_t start = parse_positive(parts[0], flag, item);
  const int64_t end = parse_positive(parts[1], flag, item);
  if (end < start) bad_token(flag, item, "ends below its start");
  std::string_view step = parts[2];
  const bool geometric = !step.empty() && (step.front() == 'x' || step.front() == '*');
  const bool arithmetic = !step.empty() && step.front() == '+';
  if (!geometric && !arithmetic) bad_token(flag, item, "needs a step 'xFACTOR' (geometric) or '+STEP' (arithmetic)");
  step.remove_prefix(1);
  const int64_t amount = parse_positive(step, flag, item);
  if (geometric && amount < 2) bad_token(flag, item, "needs a factor of at least 2");
  for (int64_t value = start; value <= end;) {
    values.push_back(value);
    if (values.size() > kMaxListLength) bad_token(flag, item, fmt::format("gives more than {} values", kMaxListLength));
    // Stop before the next step would overflow.
    if (geometric ? value > end / amount : value > end - amount) break;
    value = geometric ? value * amount : value + amount;
  }
}

using json = nlohmann::json;

std::vector<int64_t> int_axis(const json& value, std::string_view key) {
  if (value.is_string()) return parse_int_list(value.get<std::string>(), key);
  if (value.is_number_integer()) {
    const int64_t v = json_integer(value, key);
    if (v <= 0) bad_token(key, value.dump(), "must be positive");
    return {v};
  }
  if (value.is_array() && !value.empty()) {
    std::vector<int64_t> values;
    for (const json& item : value) {
      if (item.is_string()) {
        for (int64_t v : parse_int_list(item.get<std::string>(), key)) values.push_back(v);
        continue;
      }
      const std::optional<int64_t> v = item.is_number_integer() ? json_integer_if(item) : std::nullopt;
      if (!v || *v <= 0) bad_token(key, item.dump(), "must be a positive integer");
      values.push_back(*v);
    }
    if (values.size() > kMaxListLength)
      throw UsageError(fmt::format("{}: gives {} values, more than {}", key, values.size(), kMaxListLength));
    return values;
  }
  throw UsageError(fmt::format("{}: expected an integer, a list of integers or a range string, got {}", key, value.dump()));
}

std::vector<bool> bool_axis(const json& value, std::string_view key) {
  if (value.is_boolean()) return {value.get<bool>()};
  if (value.is_string()) return parse_bool_list(value.get<std::string>(), key);
  if (value.is_array() && !value.empty()) {
    std::vector<bool> values;
    for (const json& item : value) {
      if (!item.is_boolean()) bad_token(key, item.dump(), "must be true or false");
      values.push_back(item.get<bool>());
    }
    return values;
  }
  throw UsageError(fmt::format("{}: expected true, false or a list of them, got {}", key, value.dump()));
}

// A string or a list of strings, joined into the comma syntax of the command line.
std::string joined_names(const json& value, std::string_view key) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array() && !value.empty()) {
    std::string text;
    for (const json& item : value) {
      if (!item.is_string()) bad_token(key, item.dump(), "must be a name");
      if (!text.empty()) text += ',';
      text += item.get<std::string>();
    }
    return text;
  }
  throw UsageError(fmt::format("{}: expected a name or a list of names, got {}", key, value.dump()));
}

std::vector<Dtype> parse_dtype_list(std::string_view text, std::string_view flag) {
  std::vector<Dtype> values;
  for (std::string_view item : split(text, ',')) {
    if (item.empty()) bad_token(flag, text, "has an empty item");
    try {
      values.push_back(parse_dtype(item));
    } catch (const UsageError& error) {
      throw UsageError(fmt::format("{}: {}", flag, error.what()));
    }
  }
  return values;
}

template <class T>
T number_field(const json& value, std::string_view key) {
  if (!value.is_number()) throw UsageError(fmt::format("{}: expected a number, got {}", key, value.dump()));
  if constexpr (std::is_integral_v<T>) {
    if (!value.is_number_integer()) throw UsageError(fmt::format("{}: expected an integer, got {}", key, value.dump()));
    return json_integer<T>(value, key);
  } else {
    return value.get<T>();
  }
}

}  // namespace

std::vector<int64_t> parse_int_list(std::string_view text, std::string_view flag) {
  if (trim(text).empty()) throw UsageError(fmt::format("{}: empty list", flag));
  std::vector<int64_t> values;
  for (std::string_view item : split(text, ',')) {
    if (item.empty()) bad_token(flag, text, "has an empty item");
    if (item.find(':') != std::string_view::npos) append_range(item, flag, values);
    else values.push_back(parse_positive(item, flag, item));
    if (values.size() > kMaxListLength) bad_token(flag, text, fmt::format("gives more than {} values", kMaxListLength));
  }
  return values;
}

std::vector<double> parse_probability_list(std::string_view text, std::string_view flag) {
  if (trim(text).empty()) throw UsageError(fmt::format("{}: empty list", flag));
  std::vector<double> values;
  for (std::string_view item : split(text, ',')) {
    double value = 0;
    const char* end = item.data() + item.size();
    const auto [stop, error] = std::from_chars(item.data(), end, value);
    if (item.empty() || error != std::errc() || stop != end) bad_token(flag, item, "is not a number");
    if (!(value >= 0 && value <= kMaxDropout)) bad_token(flag, item, fmt::format("is outside [0, {}]", kMaxDropout));
    values.push_back(value);
  }
  return values;
}

std::vector<bool> parse_bool_list(std::string_view text, std::string_view flag) {
  if (trim(text).empty()) throw UsageError(fmt::format("{}: empty list", flag));
  std::vector<bool> values;
  for (std::string_view item : split(text, ',')) {
    if (item == "true" || item == "1" || item == "yes") values.push_back(true);
    else if (item == "false" || item == "0" || item == "no") values.push_back(false);
    else if (item == "both") {
      values.push_back(false);
      values.push_back(true);
    } else bad_token(flag, item, "is not true, false or both");
  }
  return values;
}

std::vector<Variant> parse_variant_list(std::string_view text, std::string_view flag) {
  if (trim(text) == "all") return {kAllVariants.begin(), kAllVariants.end()};
  if (trim(text).empty()) throw UsageError(fmt::format("{}: empty list", flag));
  std::vector<Variant> values;
  for (std::string_view item : split(text, ',')) {
    if (item.empty()) bad_token(flag, text, "has an empty item");
    Variant variant;
    try {
      variant = parse_variant(item);
    } catch (const UsageError& error) {
      throw UsageError(fmt::format("{}: {}", flag, error.what()));
    }
    for (Variant seen : values)
      if (seen == variant) bad_token(flag, item, "is listed twice");
    values.push_back(variant);
  }
  return values;
}

std::vector<std::string> variant_names(const std::vector<Variant>& variants) {
  std::vector<std::string> names;
  for (Variant variant : variants) names.emplace_back(to_string(variant));
  return names;
}

namespace {
// Implementation names: checked against the device later (the registry knows them), here only for
// shape: no empty item, none twice.
std::vector<std::string> parse_name_list(std::string_view text, std::string_view flag) {
  if (trim(text).empty()) throw UsageError(fmt::format("{}: empty list", flag));
  std::vector<std::string> names;
  for (std::string_view item : split(text, ',')) {
    if (item.empty()) bad_token(flag, text, "has an empty item");
    if (std::find(names.begin(), names.end(), item) != names.end()) bad_token(flag, item, "is listed twice");
    names.emplace_back(item);
  }
  return names;
}
}  // namespace

std::vector<Problem> expand(const SweepSpec& spec) {
  // Counted before anything is built: seven axes of 4096 values would be 2^84 problems.
  uint64_t count = 1;
  // --tokens replaces the batch axis: one configuration per T, its B = T / N.
  const bool by_tokens = !spec.tokens.empty();
  const std::vector<int64_t>& batch_or_tokens = by_tokens ? spec.tokens : spec.batch;
  for (size_t size : {spec.dtype.size(), spec.causal.size(), batch_or_tokens.size(), spec.heads.size(),
                      std::max<size_t>(spec.kv_heads.size(), 1), spec.head_dim.size(), spec.layers.size(),
                      spec.dropout.size(), spec.expand_kv.size(), std::max<size_t>(spec.seq_k.size(), 1),
                      spec.seq.size()}) {
    count *= size;
    if (count > kMaxConfigurations)
      throw UsageError(fmt::format("the sweep has more than {} configurations (the product of its axes)",
                                   kMaxConfigurations));
  }
  std::vector<Problem> problems;
  const std::vector<int64_t> paired = {0};  // N_k = N
  const std::vector<int64_t>& seq_k = spec.seq_k.empty() ? paired : spec.seq_k;
  const std::vector<int64_t> same_heads = {0};  // G = H
  const std::vector<int64_t>& kv_heads = spec.kv_heads.empty() ? same_heads : spec.kv_heads;
  for (Dtype dtype : spec.dtype)
    for (bool causal : spec.causal)
      for (int64_t batch_or_token_count : batch_or_tokens)
        for (int64_t heads : spec.heads)
          for (int64_t groups : kv_heads)
            for (int64_t head_dim : spec.head_dim)
              for (int64_t layers : spec.layers)
                for (double dropout : spec.dropout)
                  for (bool expand : spec.expand_kv)
                    for (int64_t keys : seq_k)
                      for (int64_t seq : spec.seq) {
                        if (by_tokens && batch_or_token_count % seq != 0)
                          throw UsageError(fmt::format(
                              "--tokens {} is not a multiple of N = {}: B = tokens / N must be a whole number",
                              batch_or_token_count, seq));
                        Problem p;
                        p.batch = by_tokens ? batch_or_token_count / seq : batch_or_token_count;
                        p.heads = heads;
                        p.kv_heads = groups;
                        p.seq = seq;
                        p.seq_kv = keys;
                        p.head_dim = head_dim;
                        p.layers = layers;
                        p.causal = causal;
                        p.dropout = dropout;
                        p.expand_kv = expand;
                        p.dtype = dtype;
                        validate(p);
                        if (expand && !p.repeats_kv()) continue;  // G = H: the same as native
                        problems.push_back(p);
                      }
  return problems;
}

SweepSpec parse_sweep_json(std::string_view text, std::string_view source_name) {
  json document;
  try {
    document = parse_json_bounded<json>(text, source_name);
  } catch (const json::exception& error) {
    throw UsageError(fmt::format("{}: not valid JSON: {}", source_name, error.what()));
  }
  if (!document.is_object()) throw UsageError(fmt::format("{}: a sweep file holds one JSON object", source_name));

  if (document.contains("batch") && document.contains("tokens"))
    throw UsageError(fmt::format("{}: batch and tokens both set B: give one (tokens T makes B = T / N)", source_name));
  if (document.contains("seq") && document.contains("seq_q"))
    throw UsageError(fmt::format("{}: seq and seq_q both set N: give one", source_name));
  SweepSpec spec;
  try {
    for (const auto& [key, value] : document.items()) {
      if (key == "description") spec.description = value.get<std::string>();
      else if (key == "batch") spec.batch = int_axis(value, key);
      else if (key == "tokens") spec.tokens = int_axis(value, key);
      else if (key == "heads") spec.heads = int_axis(value, key);
      else if (key == "seq" || key == "seq_q") spec.seq = int_axis(value, key);
      else if (key == "seq_k") spec.seq_k = int_axis(value, key);
      else if (key == "kv_heads") spec.kv_heads = int_axis(value, key);
      else if (key == "expand_kv") spec.expand_kv = bool_axis(value, key);
      else if (key == "dropout") {
        if (value.is_number()) spec.dropout = parse_probability_list(value.dump(), key);
        else if (value.is_array() && !value.empty()) {
          std::string text;
          for (const json& item : value) {
            if (!item.is_number()) bad_token(key, item.dump(), "must be a number");
            if (!text.empty()) text += ',';
            text += item.dump();
          }
          spec.dropout = parse_probability_list(text, key);
        } else throw UsageError(fmt::format("dropout: expected a number or a list of numbers, got {}", value.dump()));
      }
      else if (key == "head_dim") spec.head_dim = int_axis(value, key);
      else if (key == "layers") spec.layers = int_axis(value, key);
      else if (key == "causal") spec.causal = bool_axis(value, key);
      else if (key == "dtype") spec.dtype = parse_dtype_list(joined_names(value, key), key);
      else if (key == "variants") spec.variants = parse_variant_list(joined_names(value, key), key);
      else if (key == "impls") spec.implementations = parse_name_list(joined_names(value, key), key);
      else if (key == "backend") spec.backend = value.get<std::string>();
      else if (key == "threads") spec.threads = number_field<int>(value, key);
      else if (key == "sampling") {
        if (!value.is_object()) throw UsageError("sampling: expected an object");
        for (const auto& [name, field] : value.items()) {
          SamplingPolicy& s = spec.sampling;
          if (name == "warmup") s.warmup = number_field<int>(field, name);
          else if (name == "warmup_ms") s.warmup_ms = number_field<double>(field, name);
          else if (name == "min_samples") s.min_samples = number_field<int>(field, name);
          else if (name == "max_samples") s.max_samples = number_field<int>(field, name);
          else if (name == "max_noise") s.max_noise = number_field<double>(field, name);
          else if (name == "max_time_s") s.max_time_s = number_field<double>(field, name);
          else if (name == "throttle_threshold") s.throttle_threshold = number_field<double>(field, name);
          else throw UsageError(fmt::format("unknown key 'sampling.{}'", name));
        }
      } else throw UsageError(fmt::format("unknown key '{}'", key));
    }
  } catch (const json::exception& error) {
    throw UsageError(fmt::format("{}: {}", source_name, error.what()));
  } catch (const UsageError& error) {
    throw UsageError(fmt::format("{}: {}", source_name, error.what()));
  }
  return spec;
}

SweepSpec load_sweep_file(const std::string& path) {
  return parse_sweep_json(read_input_file(path, "--config", kMaxConfigFileBytes), path);
}

nlohmann::ordered_json sweep_to_json(const SweepSpec& spec) {
  nlohmann::ordered_json j;
  j["description"] = spec.description;
  // A sweep at fixed tokens records them in place of the batch (the batch follows from N); a sweep
  // without them keeps the keys, and so the hash, it always had.
  if (spec.tokens.empty()) j["batch"] = spec.batch;
  else j["tokens"] = spec.tokens;
  j["heads"] = spec.heads;
  j["seq"] = spec.seq;
  j["head_dim"] = spec.head_dim;
  j["layers"] = spec.layers;
  j["causal"] = spec.causal;
  j["dtype"] = nlohmann::ordered_json::array();
  for (Dtype dtype : spec.dtype) j["dtype"].push_back(std::string(to_string(dtype)));
  // The implementations by name replace the variants when given; one of the two decides what runs.
  if (spec.implementations.empty()) j["variants"] = variant_names(spec.variants);
  else j["impls"] = spec.implementations;
  j["backend"] = spec.backend;
  j["threads"] = spec.threads;
  const SamplingPolicy& s = spec.sampling;
  j["sampling"] = {{"warmup", s.warmup},           {"warmup_ms", s.warmup_ms},   {"min_samples", s.min_samples},
                   {"max_samples", s.max_samples}, {"max_noise", s.max_noise}, {"max_time_s", s.max_time_s},
                   {"throttle_threshold", s.throttle_threshold}};
  return j;
}

void apply_overrides(SweepSpec& spec, const SweepOverrides& o) {
  if (o.batch && o.tokens) throw UsageError("--batch and --tokens both set B: give one (--tokens T makes B = T / N)");
  if (o.batch) {
    spec.batch = parse_int_list(*o.batch, "--batch");
    spec.tokens.clear();
  }
  if (o.tokens) spec.tokens = parse_int_list(*o.tokens, "--tokens");
  if (o.heads) spec.heads = parse_int_list(*o.heads, "--heads");
  if (o.seq && o.seq_q) throw UsageError("--seq and --seq-q both set N: give one (--seq also sets N_k)");
  if (o.seq) {
    spec.seq = parse_int_list(*o.seq, "--seq");
    spec.seq_k.clear();
  }
  if (o.seq_q) spec.seq = parse_int_list(*o.seq_q, "--seq-q");
  if (o.seq_k) spec.seq_k = parse_int_list(*o.seq_k, "--seq-k");
  if (o.kv_heads) spec.kv_heads = parse_int_list(*o.kv_heads, "--kv-heads");
  if (o.expand_kv) spec.expand_kv = parse_bool_list(*o.expand_kv, "--expand-kv");
  if (o.dropout) spec.dropout = parse_probability_list(*o.dropout, "--dropout");
  if (o.head_dim) spec.head_dim = parse_int_list(*o.head_dim, "--head-dim");
  if (o.layers) spec.layers = parse_int_list(*o.layers, "--layers");
  if (o.causal) spec.causal = parse_bool_list(*o.causal, "--causal");
  if (o.dtype) spec.dtype = parse_dtype_list(*o.dtype, "--dtype");
  if (o.variants) spec.variants = parse_variant_list(*o.variants, "--variant");
  if (o.implementations) spec.implementations = parse_name_list(*o.implementations, "--impl");
  if (o.variants && o.implementations) throw UsageError("--variant and --impl exclude each other: --impl names each one");
  if (o.backend) spec.backend = *o.backend;
  if (o.threads) spec.threads = *o.threads;
  if (o.warmup) spec.sampling.warmup = *o.warmup;
  if (o.warmup_ms) spec.sampling.warmup_ms = *o.warmup_ms;
  if (o.min_samples) spec.sampling.min_samples = *o.min_samples;
  if (o.max_samples) spec.sampling.max_samples = *o.max_samples;
  if (o.max_noise) spec.sampling.max_noise = *o.max_noise;
  if (o.max_time_s) spec.sampling.max_time_s = *o.max_time_s;
  if (o.throttle_threshold) spec.sampling.throttle_threshold = *o.throttle_threshold;
}

SweepSpec resolve_sweep(const std::optional<std::string>& config_path, const SweepOverrides& overrides) {
  SweepSpec spec = config_path ? load_sweep_file(*config_path) : SweepSpec{};
  apply_overrides(spec, overrides);
  if (spec.threads < 0) throw UsageError(fmt::format("--threads must be 0 (default) or more (got {})", spec.threads));
  validate(spec.sampling);
  return spec;
}

}  // namespace flashbench
