#pragma once
// The JSON contract (docs/json.md): the run's metadata, a row and its problem, the CPU ceilings, and
// back. The reporters (reporter.hpp) and the files read back (results_file.hpp) are built on it.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/core/peak.hpp"
#include "flashbench/core/result.hpp"

namespace flashbench {

inline constexpr int kSchemaVersion = 1;

// A value the contract writes as null when it is absent (nlohmann 3.11 converts no std::optional).
template <class T>
nlohmann::ordered_json json_or_null(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

// The run's metadata: tool, version, git revision, build {type, compiler, flags, native, cuda},
// host {cpu, cores, omp_threads, hostname}, time (ISO-8601 UTC), argv. The device a run uses adds
// its own block (Device::describe: "gpu" for CUDA); `run --peak` adds "cpu_peak" (docs/json.md).
nlohmann::ordered_json make_meta(const std::vector<std::string>& argv);

// One row in the JSON contract (docs/json.md lists every key, its unit and when it is null or
// absent): times [ms], memory [bytes], throughput [TFLOP/s], flop [FLOP]; a value that was not
// measured (an oom row's times) is null; warnings are the lines the table prints under the row.
nlohmann::ordered_json row_to_json(const Row& row);
// A row's `problem` block: {batch, heads, kv_heads, seq, seq_q, seq_k, head_dim, layers, causal,
// dropout, expand_kv, dtype} (docs/json.md).
nlohmann::ordered_json problem_to_json(const Problem& problem);
// The inverse, for `compare`, plots' tests and anything reading our own files. Missing optional
// parts (model, check, samples) stay empty; a missing required key throws UsageError.
Row row_from_json(const nlohmann::json& json);

// The CPU ceilings as `info --peak --format json` writes them ("peak": threads, simd, fma_gflops[_best],
// sgemm_size, sgemm_gflops[_best], openblas_sgemm_gflops (null without OpenBLAS), openblas_core,
// products), and back, for `run --peak-file`: empty unless threads, fma_gflops and a positive
// sgemm_gflops are there.
nlohmann::ordered_json peak_to_json(const PeakReport& peak);
std::optional<PeakReport> peak_from_json(const nlohmann::json& json);

}  // namespace flashbench
