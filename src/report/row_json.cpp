// A row's JSON form (the JSON contract, docs/json.md) and its inverse, and reading result files.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/input_file.hpp"
#include "flashbench/core/json_integer.hpp"
#include "flashbench/report/json.hpp"
#include "flashbench/report/reporter.hpp"
#include "flashbench/report/results_file.hpp"

namespace flashbench {

namespace {

using ordered_json = nlohmann::ordered_json;
using json = nlohmann::json;

// A number, or null when there is nothing to report (no samples, a zero time).
ordered_json number_or_null(double value, bool present) { return present ? ordered_json(value) : ordered_json(nullptr); }

ordered_json timing_to_json(const TimingSummary& t) {
  // Rows read from a peer's file may carry a median without samples.
  const bool has = t.count() > 0 || t.median_ms > 0;
  ordered_json j;
  j["median_ms"] = number_or_null(t.median_ms, has);
  j["mean_ms"] = number_or_null(t.mean_ms, has);
  j["stddev_ms"] = number_or_null(t.stddev_ms, has);
  j["min_ms"] = number_or_null(t.min_ms, has);
  j["max_ms"] = number_or_null(t.max_ms, has);
  j["samples_ms"] = t.samples_ms;
  j["count"] = t.count();
  j["cv"] = number_or_null(t.cv, has);
  j["median_noise"] = number_or_null(t.median_noise, has);
  j["noise_target"] = t.noise_target;
  j["noisy"] = t.noisy;
  j["first_outlier"] = t.first_outlier;
  if (!t.round_medians_ms.empty()) j["round_medians_ms"] = t.round_medians_ms;
  // The timing protocol's clock keys (as the torch peers write them): null where the device reads
  // no clocks.
  const bool clocked = !t.clocks.empty();
  const auto per_sample = [&](auto field) {
    if (!clocked) return ordered_json(nullptr);
    ordered_json values = ordered_json::array();
    for (const SampleClock& clock : t.clocks) values.push_back(json_or_null(field(clock)));
    return values;
  };
  j["throttled_samples"] = json_or_null(t.throttled_samples);
  j["excluded_samples"] = t.excluded_samples;
  j["min_unthrottled_samples"] = t.min_unthrottled;
  j["median_unthrottled_ms"] = json_or_null(t.median_unthrottled_ms);
  j["sm_clock_mhz"] = per_sample([](const SampleClock& c) { return c.sm_clock_mhz; });
  j["clock_event_reason_bits"] = per_sample([](const SampleClock& c) { return c.clock_event_reasons; });
  j["throttled"] = per_sample([](const SampleClock& c) { return c.throttled; });
  return j;
}

// NVML's view of the GPU; fields it did not report are null.
ordered_json gpu_state_to_json(const GpuState& state) {
  auto watts = [](const std::optional<unsigned>& milliwatts) {
    return milliwatts ? ordered_json(*milliwatts / 1000.0) : ordered_json(nullptr);
  };
  ordered_json j;
  j["sm_clock_mhz"] = json_or_null(state.sm_clock_mhz);
  j["max_sm_clock_mhz"] = json_or_null(state.max_sm_clock_mhz);
  j["memory_clock_mhz"] = json_or_null(state.memory_clock_mhz);
  j["power_w"] = watts(state.power_mw);
  j["power_limit_w"] = watts(state.power_limit_mw);
  j["temperature_c"] = json_or_null(state.temperature_c);
  j["clock_event_reasons"] =
      state.clock_event_reasons ? ordered_json(clock_event_reason_names(*state.clock_event_reasons)) : ordered_json(nullptr);
  j["power_violation_ns"] = json_or_null(state.power_violation_ns);
  j["thermal_violation_ns"] = json_or_null(state.thermal_violation_ns);
  return j;
}

ordered_json tags_to_json(const TagBytes& tags) {
  ordered_json j = ordered_json::object();
  for (Tag tag : kAllTags) j[std::string(to_string(tag))] = tags[tag];
  return j;
}


// Reading back: required keys throw a UsageError naming the key, optional ones default.
const json& required(const json& j, const char* key, std::string_view where) {
  if (!j.is_object() || !j.contains(key))
    throw UsageError(fmt::format("results file: {} has no \"{}\"", where, key));
  return j.at(key);
}

double number_or(const json& j, const char* key, double fallback) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_number()) return fallback;
  return j.at(key).get<double>();
}

// An integer field that is present must be an integer in range (a float such as 1e25 is an error,
// not a conversion); one that is absent or not a number takes the fallback.
template <class Integer = int64_t>
Integer integer_or(const json& j, const char* key, Integer fallback) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_number()) return fallback;
  return json_integer<Integer>(j.at(key), fmt::format("results file: \"{}\"", key));
}

int64_t required_integer(const json& j, const char* key, std::string_view where) {
  return json_integer(required(j, key, where), fmt::format("results file: {}.{}", where, key));
}

Phase parse_phase(const json& j) {
  if (!j.is_string()) return Phase::fwd;
  const std::string name = j.get<std::string>();
  if (name == "bwd") return Phase::bwd;
  if (name == "setup") return Phase::setup;
  return Phase::fwd;
}

Status parse_status(std::string_view name) {
  for (Status s : {Status::ok, Status::skipped, Status::oom, Status::failed})
    if (to_string(s) == name) return s;
  throw UsageError(fmt::format("results file: unknown status '{}'", name));
}

TimingSummary timing_from_json(const json& j) {
  TimingSummary t;
  if (!j.is_object()) return t;
  if (j.contains("samples_ms") && j.at("samples_ms").is_array())
    t.samples_ms = j.at("samples_ms").get<std::vector<double>>();
  t.median_ms = number_or(j, "median_ms", 0);
  t.mean_ms = number_or(j, "mean_ms", 0);
  t.stddev_ms = number_or(j, "stddev_ms", 0);
  t.min_ms = number_or(j, "min_ms", 0);
  t.max_ms = number_or(j, "max_ms", 0);
  t.cv = number_or(j, "cv", t.mean_ms > 0 ? t.stddev_ms / t.mean_ms : 0);
  t.median_noise = number_or(j, "median_noise", 0);
  t.noise_target = number_or(j, "noise_target", 0);
  t.noisy = j.value("noisy", false);
  t.first_outlier = j.value("first_outlier", false);
  if (j.contains("round_medians_ms") && j.at("round_medians_ms").is_array())
    t.round_medians_ms = j.at("round_medians_ms").get<std::vector<double>>();
  if (j.contains("throttled_samples") && j.at("throttled_samples").is_number())
    t.throttled_samples = integer_or<int64_t>(j, "throttled_samples", 0);
  t.excluded_samples = integer_or<int64_t>(j, "excluded_samples", 0);
  t.min_unthrottled = integer_or<int64_t>(j, "min_unthrottled_samples", 1);
  if (j.contains("median_unthrottled_ms") && j.at("median_unthrottled_ms").is_number())
    t.median_unthrottled_ms = j.at("median_unthrottled_ms").get<double>();
  // Per-sample clocks, kept only where each list has one entry per sample.
  const auto per_sample = [&](const char* key) -> const json* {
    if (!j.contains(key) || !j.at(key).is_array() || j.at(key).size() != t.samples_ms.size()) return nullptr;
    return &j.at(key);
  };
  const json* sm = per_sample("sm_clock_mhz");
  const json* reasons = per_sample("clock_event_reason_bits");
  const json* throttled = per_sample("throttled");
  if ((sm || reasons || throttled) && !t.samples_ms.empty()) {
    t.clocks.resize(t.samples_ms.size());
    const std::string where = "results file: a sample's clock";
    for (size_t i = 0; i < t.clocks.size(); ++i) {
      // A clock in MHz and NVML's reason bits: integers that are not negative.
      const auto natural = [&](const json& value, const std::string& what) {
        const int64_t v = json_integer<int64_t>(value, what);
        if (v < 0) throw UsageError(fmt::format("{} must not be negative, got {}", what, v));
        return v;
      };
      if (sm && (*sm)[i].is_number())
        t.clocks[i].sm_clock_mhz = unsigned(std::min<int64_t>(natural((*sm)[i], where + " in MHz"), UINT32_MAX));
      if (reasons && (*reasons)[i].is_number())
        t.clocks[i].clock_event_reasons = uint64_t(natural((*reasons)[i], where + "'s reason bits"));
      if (throttled && (*throttled)[i].is_boolean()) t.clocks[i].throttled = (*throttled)[i].get<bool>();
    }
  }
  return t;
}

TagBytes tags_from_json(const json& j) {
  TagBytes tags;
  for (Tag tag : kAllTags) tags[tag] = integer_or<int64_t>(j, std::string(to_string(tag)).c_str(), 0);
  return tags;
}

}  // namespace

ordered_json problem_to_json(const Problem& p) {
  ordered_json j;
  j["batch"] = p.batch;
  j["heads"] = p.heads;
  j["kv_heads"] = p.key_heads();
  j["seq"] = p.seq;
  j["seq_q"] = p.seq;
  j["seq_k"] = p.key_seq();
  j["head_dim"] = p.head_dim;
  j["layers"] = p.layers;
  j["causal"] = p.causal;
  j["dropout"] = p.dropout;
  j["expand_kv"] = p.repeats_kv();
  j["dtype"] = std::string(to_string(p.dtype));
  return j;
}

std::vector<std::string> row_warnings(const Row& row) {
  std::vector<std::string> warnings = timing_warnings(row.fwd, "fwd");
  for (std::string& w : timing_warnings(row.bwd, "bwd")) warnings.push_back(std::move(w));
  if (!row.time_budget_cut.empty()) warnings.push_back(row.time_budget_cut);
  if (!row.check && !row.not_checked.empty()) warnings.push_back("not checked: " + row.not_checked);
  for (const std::string& hazard : row.hazards) warnings.push_back(hazard);
  if (row.reproducibility && row.reproducibility->deterministic == false)
    warnings.push_back("not deterministic: a second pass on the same inputs gave other bits of the outputs or of dQ, dK, dV");
  // Where each sample's clocks were read, their count (timing_warnings) says it more exactly.
  if (row.gpu_start && row.gpu_end && row.bwd.clocks.empty())
    if (std::optional<std::string> throttled = throttle_warning(*row.gpu_start, *row.gpu_end)) warnings.push_back(*throttled);
  if (row.check && !row.check->passed())
    warnings.push_back(fmt::format("check against {} failed: max relative error {:.3g} > tolerance {:.3g}",
                                   row.check->reference, row.check->max_rel_err, row.check->tolerance));
  return warnings;
}

ordered_json row_to_json(const Row& row) {
  ordered_json j;
  j["backend"] = row.backend;
  j["variant"] = std::string(to_string(row.variant));
  j["impl"] = row.implementation();
  j["problem"] = problem_to_json(row.problem);
  j["status"] = std::string(to_string(row.status));
  j["reason"] = row.reason;
  j["timing"]["fwd"] = timing_to_json(row.fwd);
  j["timing"]["bwd"] = timing_to_json(row.bwd);
  j["timing"]["interleaved_with"] = row.interleaved_with;
  if (!row.sampled_alone.empty()) j["timing"]["sampled_alone"] = row.sampled_alone;
  if (!row.time_budget_cut.empty()) j["timing"]["time_budget"] = row.time_budget_cut;
  j["throughput"]["fwd_tflops"] = number_or_null(row.fwd_tflops(), row.fwd.median_ms > 0);
  j["throughput"]["bwd_tflops"] = number_or_null(row.bwd_tflops(), row.bwd.median_ms > 0);
  if (row.peak_gflops) {
    j["throughput"]["peak_gflops"] = *row.peak_gflops;
    j["throughput"]["fwd_of_peak"] = number_or_null(row.fwd_of_peak().value_or(0), row.fwd_of_peak().has_value());
    j["throughput"]["bwd_of_peak"] = number_or_null(row.bwd_of_peak().value_or(0), row.bwd_of_peak().has_value());
  }
  j["flop"]["fwd"] = row.problem.forward_flop();
  j["flop"]["bwd"] = row.problem.backward_flop();
  j["bwd_over_fwd"] = number_or_null(row.bwd.median_ms / row.fwd.median_ms, row.fwd.median_ms > 0 && row.bwd.median_ms > 0);

  ordered_json measured;
  measured["peak_bytes"] = row.measured.peak_bytes;
  measured["peak_phase"] = std::string(to_string(row.measured.peak_phase));
  measured["kept_bytes"] = row.measured.kept_bytes;
  measured["by_tag"] = tags_to_json(row.measured.by_tag);
  measured["high_water"] = tags_to_json(row.measured.high_water);
  measured["os_peak_bytes"] = json_or_null(row.measured.os_peak_bytes);
  j["memory"]["measured"] = std::move(measured);
  if (row.model) {
    ordered_json model;
    model["peak_bytes"] = row.model->peak_bytes;
    model["kept_bytes"] = row.model->kept_bytes;
    model["by_tag"] = tags_to_json(row.model->by_tag);
    model["peak_phase"] = std::string(to_string(row.model->peak_phase));
    j["memory"]["model"] = std::move(model);
  }
  if (row.check) {
    ordered_json check;
    check["reference"] = row.check->reference;
    check["max_rel_err"] = row.check->max_rel_err;
    check["tolerance"] = row.check->tolerance;
    check["passed"] = row.check->passed();
    if (row.check->naive_rel_err) check["naive_rel_err"] = *row.check->naive_rel_err;
    if (!row.check->tensors.empty()) {
      ordered_json tensors = ordered_json::object();
      for (const CheckedTensor& tensor : row.check->tensors) {
        ordered_json entry;
        entry["rel_err"] = tensor.rel_err;
        if (tensor.naive_rel_err) entry["naive_rel_err"] = *tensor.naive_rel_err;
        tensors[tensor.name] = std::move(entry);
      }
      check["tensors"] = std::move(tensors);
    }
    if (!row.check->not_compared.empty()) check["not_compared"] = row.check->not_compared;
    if (row.check->reference_seconds) check["reference_seconds"] = *row.check->reference_seconds;
    j["check"] = std::move(check);
  } else {
    j["check"] = nullptr;
  }
  if (!row.not_checked.empty()) j["not_checked"] = row.not_checked;
  if (row.reproducibility) {
    const Reproducibility& r = *row.reproducibility;
    j["reproducibility"] = {{"seed", r.seed},
                            {"input_scale", r.input_scale},
                            {"inputs_hash", r.inputs_hash},
                            {"results_hash", r.results_hash},
                            {"deterministic", json_or_null(r.deterministic)}};
  } else {
    j["reproducibility"] = nullptr;
  }
  j["hazards"] = row.hazards;
  j["threads"] = row.threads;
  j["device"] = row.device;
  if (!row.isa.empty()) j["isa"] = row.isa;
  if (!row.library.empty()) j["library"] = row.library;
  if (!row.driver.empty()) j["driver"] = row.driver;
  if (row.device_index) j["device_index"] = *row.device_index;
  if (row.gpu_start || row.gpu_end)
    j["gpu_state"] = {{"start", row.gpu_start ? gpu_state_to_json(*row.gpu_start) : ordered_json(nullptr)},
                      {"end", row.gpu_end ? gpu_state_to_json(*row.gpu_end) : ordered_json(nullptr)}};
  j["cold"] = row.cold;
  if (row.row_block > 0) {
    j["tiling"] = {{"row_block", row.row_block}, {"col_block", row.col_block}};
    if (row.diagonal_block > 0) j["tiling"]["diagonal_block"] = row.diagonal_block;
  }
  j["warnings"] = row_warnings(row);
  return j;
}

Row row_from_json(const json& j) {
  Row row;
  row.backend = required(j, "backend", "a row").get<std::string>();
  row.variant = parse_variant(required(j, "variant", "a row").get<std::string>());
  // Files written before implementations had names carry the variant only.
  row.impl = j.contains("impl") && j.at("impl").is_string() ? j.at("impl").get<std::string>() : std::string(to_string(row.variant));
  row.cold = j.value("cold", false);
  if (j.contains("not_checked") && j.at("not_checked").is_string()) row.not_checked = j.at("not_checked").get<std::string>();
  const json& p = required(j, "problem", "a row");
  row.problem.batch = required_integer(p, "batch", "problem");
  row.problem.heads = required_integer(p, "heads", "problem");
  row.problem.seq = required_integer(p, "seq", "problem");
  row.problem.head_dim = required_integer(p, "head_dim", "problem");
  row.problem.layers = integer_or<int64_t>(p, "layers", 1);
  row.problem.causal = p.value("causal", false);
  // Files written before these axes existed hold square self-attention without dropout.
  row.problem.kv_heads = integer_or(p, "kv_heads", row.problem.heads);
  row.problem.seq_kv = integer_or(p, "seq_k", row.problem.seq);
  row.problem.dropout = p.value("dropout", 0.0);
  row.problem.expand_kv = p.value("expand_kv", false);
  row.problem.dtype = parse_dtype(p.value("dtype", std::string("fp32")));
  row.status = parse_status(required(j, "status", "a row").get<std::string>());
  if (j.contains("reason") && j.at("reason").is_string()) row.reason = j.at("reason").get<std::string>();
  if (j.contains("timing")) {
    const json& timing = j.at("timing");
    if (timing.contains("fwd")) row.fwd = timing_from_json(timing.at("fwd"));
    if (timing.contains("bwd")) row.bwd = timing_from_json(timing.at("bwd"));
    if (timing.contains("interleaved_with") && timing.at("interleaved_with").is_array())
      for (const json& name : timing.at("interleaved_with"))
        if (name.is_string()) row.interleaved_with.push_back(name.get<std::string>());
    if (timing.contains("sampled_alone") && timing.at("sampled_alone").is_string())
      row.sampled_alone = timing.at("sampled_alone").get<std::string>();
    if (timing.contains("time_budget") && timing.at("time_budget").is_string())
      row.time_budget_cut = timing.at("time_budget").get<std::string>();
  }
  if (j.contains("memory")) {
    const json& memory = j.at("memory");
    if (memory.contains("measured")) {
      const json& m = memory.at("measured");
      row.measured.peak_bytes = integer_or<int64_t>(m, "peak_bytes", 0);
      row.measured.kept_bytes = integer_or<int64_t>(m, "kept_bytes", 0);
      if (m.contains("peak_phase")) row.measured.peak_phase = parse_phase(m.at("peak_phase"));
      if (m.contains("by_tag")) row.measured.by_tag = tags_from_json(m.at("by_tag"));
      if (m.contains("high_water")) row.measured.high_water = tags_from_json(m.at("high_water"));
      if (m.contains("os_peak_bytes") && m.at("os_peak_bytes").is_number())
        row.measured.os_peak_bytes = integer_or<int64_t>(m, "os_peak_bytes", 0);
    }
    if (memory.contains("model") && memory.at("model").is_object()) {
      const json& m = memory.at("model");
      ModelledMemory model;
      model.peak_bytes = integer_or<int64_t>(m, "peak_bytes", 0);
      model.kept_bytes = integer_or<int64_t>(m, "kept_bytes", 0);
      if (m.contains("by_tag")) model.by_tag = tags_from_json(m.at("by_tag"));
      if (m.contains("peak_phase")) model.peak_phase = parse_phase(m.at("peak_phase"));
      row.model = model;
    }
  }
  if (j.contains("check") && j.at("check").is_object()) {
    const json& c = j.at("check");
    Check check;
    check.reference = c.value("reference", std::string());
    check.max_rel_err = number_or(c, "max_rel_err", 0);
    // Files without a tolerance still say whether the check passed.
    check.tolerance = number_or(c, "tolerance", c.value("passed", true) ? check.max_rel_err : -1.0);
    if (c.contains("naive_rel_err") && c.at("naive_rel_err").is_number()) check.naive_rel_err = c.at("naive_rel_err").get<double>();
    if (c.contains("tensors") && c.at("tensors").is_object()) {
      const json& tensors = c.at("tensors");
      // The order they are written in; the last three names are those of the tied operator's files.
      for (const char* name : {"O", "dQ", "dK", "dV", "output", "input_grad", "context_grad"}) {
        if (!tensors.contains(name) || !tensors.at(name).is_object()) continue;
        const json& entry = tensors.at(name);
        CheckedTensor tensor{name, number_or(entry, "rel_err", 0), std::nullopt};
        if (entry.contains("naive_rel_err") && entry.at("naive_rel_err").is_number())
          tensor.naive_rel_err = entry.at("naive_rel_err").get<double>();
        check.tensors.push_back(std::move(tensor));
      }
    }
    if (c.contains("not_compared") && c.at("not_compared").is_string())
      check.not_compared = c.at("not_compared").get<std::string>();
    if (c.contains("reference_seconds") && c.at("reference_seconds").is_number())
      check.reference_seconds = c.at("reference_seconds").get<double>();
    row.check = check;
  }
  if (j.contains("reproducibility") && j.at("reproducibility").is_object()) {
    const json& r = j.at("reproducibility");
    Reproducibility& reproducibility = row.reproducibility.emplace();
    if (r.contains("seed") && r.at("seed").is_number_unsigned()) reproducibility.seed = r.at("seed").get<uint64_t>();
    reproducibility.input_scale = number_or(r, "input_scale", 1);
    if (r.contains("inputs_hash") && r.at("inputs_hash").is_string()) reproducibility.inputs_hash = r.at("inputs_hash").get<std::string>();
    if (r.contains("results_hash") && r.at("results_hash").is_string()) reproducibility.results_hash = r.at("results_hash").get<std::string>();
    if (r.contains("deterministic") && r.at("deterministic").is_boolean()) reproducibility.deterministic = r.at("deterministic").get<bool>();
  }
  if (j.contains("hazards") && j.at("hazards").is_array())
    for (const json& hazard : j.at("hazards"))
      if (hazard.is_string()) row.hazards.push_back(hazard.get<std::string>());
  row.threads = integer_or<int>(j, "threads", 0);
  if (j.contains("throughput") && j.at("throughput").is_object() && j.at("throughput").contains("peak_gflops") &&
      j.at("throughput").at("peak_gflops").is_number())
    row.peak_gflops = j.at("throughput").at("peak_gflops").get<double>();
  if (j.contains("tiling") && j.at("tiling").is_object()) {
    row.row_block = integer_or<int64_t>(j.at("tiling"), "row_block", 0);
    row.col_block = integer_or<int64_t>(j.at("tiling"), "col_block", 0);
    row.diagonal_block = integer_or<int64_t>(j.at("tiling"), "diagonal_block", 0);
  }
  if (j.contains("device") && j.at("device").is_string()) row.device = j.at("device").get<std::string>();
  if (j.contains("isa") && j.at("isa").is_string()) row.isa = j.at("isa").get<std::string>();
  if (j.contains("library") && j.at("library").is_string()) row.library = j.at("library").get<std::string>();
  if (j.contains("driver") && j.at("driver").is_string()) row.driver = j.at("driver").get<std::string>();
  if (j.contains("device_index") && j.at("device_index").is_number_integer())
    row.device_index = integer_or<int>(j, "device_index", 0);
  return row;
}

ResultsFile read_results_file(const std::string& path) {
  const std::string text = read_input_file(path, "results file", kMaxResultsFileBytes);
  const bool lines = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  return parse_results(text, lines, path);
}

ResultsFile parse_results(std::string_view text, bool lines, std::string_view path) {
  ResultsFile file;
  const auto add_row = [&file, path](ordered_json object) {
    if (!object.is_object())
      throw UsageError(fmt::format("'{}' is not a flashbench results file: a row is not a JSON object", path));
    file.rows.push_back(row_from_json(json(object)));
    file.row_objects.push_back(std::move(object));
  };
  try {
    if (!lines) {
      const ordered_json document = parse_json_bounded<ordered_json>(text, path);
      if (!document.is_object()) throw UsageError(fmt::format("'{}' is not a flashbench results file: not a JSON object", path));
      if (document.contains("schema_version")) file.schema_version = document.at("schema_version");
      if (document.contains("meta")) file.meta = document.at("meta");
      if (!document.contains("rows")) throw UsageError(fmt::format("results file: {} has no \"rows\"", path));
      if (!document.at("rows").is_array())
        throw UsageError(fmt::format("'{}' is not a flashbench results file: \"rows\" is not a list", path));
      for (const ordered_json& row : document.at("rows")) add_row(row);
      return file;
    }
    size_t start = 0;
    while (start < text.size()) {
      const size_t newline = text.find('\n', start);
      const std::string_view line = text.substr(start, newline == std::string_view::npos ? std::string_view::npos
                                                                                         : newline - start);
      start = newline == std::string_view::npos ? text.size() : newline + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      ordered_json record = parse_json_bounded<ordered_json>(line, path, false);
      if (record.is_discarded() && newline == std::string_view::npos) {
        file.cut_last_line = true;  // the writer was killed in the middle of this line
        break;
      }
      if (record.is_discarded()) record = parse_json_bounded<ordered_json>(line, path);  // throws, saying where
      if (!record.is_object())
        throw UsageError(fmt::format("'{}' is not a flashbench results file: a line is not a JSON object", path));
      if (record.contains("meta")) {
        file.meta = record.at("meta");
        if (record.contains("schema_version")) file.schema_version = record.at("schema_version");
      } else if (!record.contains("summary")) {
        add_row(std::move(record));
      }
    }
  } catch (const json::exception& error) {
    throw UsageError(fmt::format("'{}' is not a flashbench results file: {}", path, error.what()));
  }
  return file;
}

void require_our_schema(const ResultsFile& file, std::string_view path) {
  if (file.schema_version.is_null()) return;
  const ordered_json& version = file.schema_version;
  if (!version.is_number_integer() || json_integer_if(version) != std::optional<int64_t>(kSchemaVersion))
    throw UsageError(fmt::format("'{}' has schema_version {}; this flashbench reads {}", path, version.dump(), kSchemaVersion));
}

}  // namespace flashbench
