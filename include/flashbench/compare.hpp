#pragma once
// Comparing two runs (or the variants of one run against `standard`), as Google Benchmark's
// compare.py does: rows matched by backend, implementation and problem; time and peak-memory ratios; a
// two-sided Mann-Whitney U test on the raw samples decides whether a time difference is real.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/result.hpp"

namespace flashbench {

enum class Verdict { same, faster, slower };
std::string_view to_string(Verdict verdict);  // "SAME", "FASTER", "SLOWER"

struct CompareOptions {
  double threshold = 0.05;  // a median must move by more than this fraction to count
  double alpha = 0.05;      // ... and the U test's p-value must be below this
};

// One phase (fwd or bwd) of one matched pair: B against A.
struct PhaseComparison {
  double median_a_ms = 0, median_b_ms = 0;
  double ratio = 0;                  // median B / median A
  std::optional<double> p_value;     // none when either side has fewer than kMinTestSamples
  Verdict verdict = Verdict::same;
};
inline constexpr size_t kMinTestSamples = 3;

struct RowComparison {
  Row a, b;  // a: the baseline (first file, or `standard`); b: the candidate
  bool timed = false;  // both ok with times; otherwise only statuses are shown
  PhaseComparison fwd, bwd;
  double peak_ratio = 0;  // measured peak B / A (0 when a has no peak)
  Verdict verdict = Verdict::same;  // SLOWER if a phase is slower, else FASTER if one is faster
};

struct Comparison {
  std::string a_name = "A", b_name = "B";  // file names, or the baseline variant and the file
  std::vector<RowComparison> pairs;
  std::vector<Row> only_a, only_b;
  bool any_slower() const;
  std::string table() const;
  nlohmann::ordered_json to_json() const;
};

// The rule for one phase: SAME unless the medians differ by more than `threshold` AND (when both
// sides have samples enough for the test) the U test's p-value is below `alpha`.
PhaseComparison compare_phase(const TimingSummary& a, const TimingSummary& b, const CompareOptions& options);

// Two runs: every row of `a` matched with the row of `b` with the same backend, implementation, problem.
Comparison compare_runs(const std::vector<Row>& a, const std::vector<Row>& b, const CompareOptions& options);

// One run: every row against the row of the `baseline` implementation (a variant's name names its
// default one, e.g. "standard") with the same backend and problem. Rows of problems without a
// baseline row are listed in only_b; a baseline that no row has is a UsageError.
Comparison compare_to_baseline(const std::vector<Row>& rows, const std::string& baseline, const CompareOptions& options);

}  // namespace flashbench
