#pragma once
// Hand-built rows with known numbers, shared by the reporter, summary and compare tests.
#include <string>
#include <vector>

#include "flashbench/core/result.hpp"

namespace flashbench::testing {

// Samples around `median_ms`: median exactly `median_ms`, spread ±1%, no outlier.
inline TimingSummary steady_timing(double median_ms, int count = 7) {
  std::vector<double> samples;
  for (int i = 0; i < count; ++i) samples.push_back(median_ms * (1.0 + 0.01 * ((i % 3) - 1)));
  return summarize(samples, 0.02);
}

inline Problem small_problem(int64_t seq = 256) {
  Problem p;
  p.batch = 1;
  p.heads = 2;
  p.seq = seq;
  p.head_dim = 32;
  p.layers = 1;
  return p;
}

inline Row timed_row(Variant variant, const Problem& problem, double fwd_ms, double bwd_ms, int64_t peak_bytes,
                     int64_t kept_bytes) {
  Row row;
  row.backend = "cpu";
  row.variant = variant;
  row.problem = problem;
  row.fwd = steady_timing(fwd_ms);
  row.bwd = steady_timing(bwd_ms);
  row.measured.peak_bytes = peak_bytes;
  row.measured.kept_bytes = kept_bytes;
  row.measured.peak_phase = Phase::bwd;
  row.measured.by_tag[Tag::input] = peak_bytes / 4;
  row.measured.by_tag[Tag::kept] = kept_bytes;
  row.measured.by_tag[Tag::grad] = peak_bytes - peak_bytes / 4 - kept_bytes;
  row.threads = 4;
  return row;
}

// One problem, four variants: standard and v2 ok with a model and a check, v1 out of memory,
// checkpoint with a failed check.
inline std::vector<Row> four_variant_rows() {
  const Problem p = small_problem();
  Row standard = timed_row(Variant::standard, p, 2.0, 4.0, 1'000'000, 524'288);
  standard.model = ModelledMemory{1'000'000, 524'288, standard.measured.by_tag, Phase::bwd};
  standard.check = Check{"float64", 2.5e-7, 1e-4, std::nullopt, {}, "", std::nullopt};
  Row v1;
  v1.variant = Variant::v1;
  v1.problem = p;
  v1.status = Status::oom;
  v1.reason = "needs 2.00 GiB, limit 1.00 GiB";
  v1.threads = 4;
  Row v2 = timed_row(Variant::v2, p, 1.0, 3.0, 300'000, 66'048);
  v2.model = ModelledMemory{290'000, 66'048, v2.measured.by_tag, Phase::bwd};
  v2.check = Check{"float64", 1.2e-6, 1e-4, std::nullopt, {{"O", 3e-7, 2e-7}, {"dQ", 1.2e-6, 4e-7}, {"dK", 5e-7, 3e-7}, {"dV", 4e-7, 3e-7}}, "", std::nullopt};
  Row checkpoint = timed_row(Variant::checkpoint, p, 2.0, 8.0, 250'000, 0);
  checkpoint.check = Check{"float64", 0.5, 1e-4, std::nullopt, {}, "", std::nullopt};
  return {standard, v1, v2, checkpoint};
}

}  // namespace flashbench::testing
