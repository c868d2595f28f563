#pragma once
// What a sweep over N says, beyond its rows: per variant the fitted exponent k of time ~ N^k and of
// peak memory ~ N^k (least squares on log-log), where v2 starts to beat standard, and bwd/fwd
// against seed 002's rule of thumb (1.5-2x is normal for v2, over 3x means too much recompute;
// docs/articles.md). The JSON form is the "summary" of docs/json.md.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/core/result.hpp"
#include "flashbench/report/compare.hpp"

namespace flashbench {

// Seed 002's bwd/fwd rule of thumb.
inline constexpr double kBwdFwdNormalLow = 1.5;
inline constexpr double kBwdFwdNormalHigh = 2.0;
inline constexpr double kBwdFwdTooHigh = 3.0;
// "below 1.5x", "normal (1.5-2x)", "above normal (2-3x)", "too high (> 3x): recompute overhead"
std::string bwd_fwd_verdict(double bwd_over_fwd);
// For a series: the verdict of its median bwd/fwd, and the N where a single point exceeds 3x when
// the median does not; standard (which recomputes nothing) is the reference, not judged.
std::string bwd_fwd_rule(Variant variant, double median, double max, int64_t max_seq);

// y ≈ a + slope·x by least squares. r2 is the coefficient of determination (1 when exact).
struct LineFit {
  double slope = 0, intercept = 0, r2 = 0;
};
// Needs two distinct x values at least; throws std::invalid_argument otherwise.
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

// One implementation on one backend, all axes but N fixed: how it scales with N.
struct ScalingSeries {
  std::string backend;
  Variant variant = Variant::standard;
  std::string impl;                  // the implementation: one series each
  Problem shape;                     // the first row's problem; its seq is meaningless here
  // True where B changes with N (a sweep at fixed tokens B·N); then shape.batch is the first row's.
  bool batch_follows_seq = false;
  std::string shape_label;           // "B=1 H=8 d=64 L=1 fp32" or "B*N=16384 H=16 d=128 L=1 bf16"
  std::vector<int64_t> seq;          // the ok rows' N, ascending
  std::optional<LineFit> time;       // log(fwd+bwd median) vs log N
  std::optional<LineFit> fwd, bwd;   // each phase on its own
  std::optional<LineFit> peak;       // log(measured peak bytes) vs log N
  std::optional<LineFit> model_peak; // the model's, when every row has one
  // The same fits over the larger half of the N (at least two points): the asymptotic exponents,
  // free of the O(N·d) terms that dominate at small N (standard memory -> 2, v2 -> 1).
  std::optional<LineFit> time_large_n, peak_large_n;
  double bwd_over_fwd_median = 0, bwd_over_fwd_max = 0;
  int64_t bwd_over_fwd_max_seq = 0;  // the N of the largest bwd/fwd
};

// Where v2 becomes faster than standard (fwd + bwd medians) along N, for one backend and shape.
struct Crossover {
  std::string backend;
  Problem shape;
  bool batch_follows_seq = false;
  std::string shape_label;
  std::vector<int64_t> seq;     // N where both ran ok
  std::vector<double> ratio;    // v2 time / standard time at each N
  // v2 against standard at each N by compare's rule on the fwd + bwd time of each sample (FASTER:
  // v2 faster beyond the threshold and the U test's alpha; SAME: no difference beyond the noise).
  std::vector<Verdict> verdict;
  // The smallest measured N from which v2 is FASTER at every larger measured N; empty when it is
  // not at the largest N.
  std::optional<int64_t> faster_from;
  // log-log interpolation of ratio = 1 between the last slower and the first faster N.
  std::optional<double> interpolated_seq;
};

// A row whose time lies far off what the same implementation's other N in the sweep predict (a
// least-squares fit of log time on log N without it, judged where other N lie on both sides): the
// machine was likely disturbed while it ran, and any ratio built on it is suspect.
struct DisturbedRow {
  std::string backend, impl;
  Problem problem;
  double measured_ms = 0;   // fwd + bwd median
  double predicted_ms = 0;  // from the fit over the series' other rows
  size_t row = 0;           // its index among the rows summarized (the document's "rows")
};
// How far a row may stray from its series' fit before it counts as disturbed: a factor either way.
inline constexpr double kDisturbedFactor = 1.5;

struct SweepSummary {
  std::vector<ScalingSeries> series;
  std::vector<Crossover> crossovers;
  std::vector<DisturbedRow> disturbed;

  // True when some series has at least two N (otherwise there is nothing to fit).
  bool has_scaling() const;
  // Aligned text for people, within `width` columns (0: every column): the least needed columns
  // give way first and the lines of prose wrap.
  std::string table(size_t width = 0) const;
  nlohmann::ordered_json to_json() const;
};

SweepSummary summarize_sweep(const std::vector<Row>& rows);

// "B=1 H=8 d=64 L=1 fp32" (causal when so): a problem without its N.
std::string describe_shape(const Problem& problem);

}  // namespace flashbench
