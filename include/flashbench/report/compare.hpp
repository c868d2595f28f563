#pragma once
// Comparing two runs (or the variants of one run against `standard`), as Google Benchmark's
// compare.py and nvbench_compare do: rows matched by backend, implementation and problem; time and
// peak-memory ratios; a two-sided Mann-Whitney U test decides whether a time difference is real —
// over the rounds' medians where both runs have rounds (`run --rounds R`: repetitions in separate
// passes over the sweep, which see the variation between runs that one run's samples do not),
// over the samples otherwise — and the load other processes put on each run's machine
// (meta.environment) can make a difference UNSURE. Runs on different hosts, devices, thread counts,
// dtypes or builds are told apart (Difference) so that the command can refuse them.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/core/result.hpp"
#include "flashbench/report/results_file.hpp"

namespace flashbench {

// UNSURE: a difference the U test and the threshold accept, but that the load other processes put
// on the slower side's machine could explain.
enum class Verdict { same, faster, slower, unsure };
std::string_view to_string(Verdict verdict);  // "SAME", "FASTER", "SLOWER", "UNSURE"

struct CompareOptions {
  double threshold = 0.05;  // a median must move by more than this fraction to count
  double alpha = 0.05;      // ... and the U test's p-value must be below this
};

inline constexpr size_t kMinTestSamples = 3;
// Fewer rounds a side than this and the test falls back to the samples: with 3 and 3 the U test's
// smallest two-sided p is 0.1, so it could never say "different" at alpha 0.05 (4 and 4: 0.029).
inline constexpr size_t kMinTestRounds = 4;

// What other processes did on a run's machine: meta.environment's CPUs other processes kept busy
// during the run (other_cpu_load), its 1-minute load averages before and after the run, and its
// logical CPUs. Absent values are unknown, not zero.
struct HostLoad {
  std::optional<double> start, end;
  std::optional<double> other_cpu;  // other_cpu_load; files written before it have only the averages
  std::optional<int> cpus;
  // The factor by which other processes could have slowed a row that ran `threads` threads (at
  // least 1): with `other` runnable threads beside those T on C CPUs each gets C / (other + T) of a
  // CPU, so the bound is max(1, (other + T) / C). `other` is other_cpu_load where recorded: the load
  // average also counts what flashbench itself left (it decays over minutes, so a run right after
  // another starts with the first one's threads in it). Otherwise the load before the run or the load
  // after it less the row's own T, whichever is larger. 1 when no load was recorded.
  double slowdown_bound(int threads) const;
};
HostLoad host_load(const nlohmann::json& meta);

// One phase (fwd or bwd) of one matched pair: B against A.
struct PhaseComparison {
  enum class Basis { samples, rounds };
  Basis basis = Basis::samples;  // rounds when both sides have kMinTestRounds round medians
  size_t count_a = 0, count_b = 0;  // rounds or samples a side
  double median_a_ms = 0, median_b_ms = 0;  // median of the round medians, or of the samples
  double ratio = 0;                  // median B / median A
  std::optional<double> p_value;     // none when either side has fewer than kMinTestSamples samples
  // The larger stddev / mean of the two sides' round medians, where both have two or more (with
  // fewer than kMinTestRounds the test runs over the samples, but the bar still rises to it).
  double round_noise = 0;
  size_t rounds = 1;                 // round medians of the side with fewer (1: a single run)
  // How much more the slower side's load could have slowed it than the faster side's did: the ratio of
  // their HostLoad::slowdown_bound, at least 1 (equal loads on both sides explain no difference).
  double load_bound = 1;
  Verdict verdict = Verdict::same;
};
std::string_view to_string(PhaseComparison::Basis basis);  // "samples", "rounds"

// A way in which the two sides of a comparison were not run alike.
struct Difference {
  std::string what;  // "host", "build", "device", "threads", "dtype"
  std::string a, b;
  bool operator==(const Difference&) const = default;
};

struct RowComparison {
  Row a, b;  // a: the baseline (first file, or `standard`); b: the candidate
  bool timed = false;  // both ok with times; otherwise only statuses are shown
  PhaseComparison fwd, bwd;
  double peak_ratio = 0;  // measured peak B / A (0 when a has no peak)
  Verdict verdict = Verdict::same;  // SLOWER if a phase is, else FASTER, else UNSURE, else SAME
  std::vector<Difference> differences;  // device, threads, dtype of this pair
};

// exp(mean(log(B/A))) over the timed pairs of one implementation of B.
struct GeometricMean {
  std::string impl;
  double fwd_ratio = 0, bwd_ratio = 0;
  size_t rows = 0;
};

struct Comparison {
  std::string a_name = "A", b_name = "B";  // file names, or the baseline variant and the file
  CompareOptions options;
  std::vector<RowComparison> pairs;
  std::vector<Row> only_a, only_b;
  std::vector<Difference> run_differences;  // host, build: the files' metas
  HostLoad load_a, load_b;

  bool any_slower() const;
  // Every difference of the runs and the pairs, each once.
  std::vector<Difference> differences() const;
  std::vector<GeometricMean> geometric_means() const;  // in order of first appearance
  // Aligned columns, then the geometric means and the legend; within `width` columns (0: every
  // column) the p-values and the medians give way first, and the lines of prose wrap.
  std::string table(size_t width = 0) const;
  std::string markdown() const;  // the same as a Markdown table, for a pull request
  nlohmann::ordered_json to_json() const;
};

// The rule for one phase. The evidence is the round medians when both sides have at least
// kMinTestRounds of them, else the samples. SAME unless the medians differ by more than the bar —
// `threshold`, or the round medians' relative spread where larger — AND (when both sides have enough
// for the test) the U test's p-value is below `alpha`. Such a difference is UNSURE instead of
// SLOWER (FASTER) when the load bound of B (A) times 1 + the bar reaches the ratio (its inverse).
PhaseComparison compare_phase(const TimingSummary& a, const TimingSummary& b, const CompareOptions& options,
                              double load_bound_a = 1, double load_bound_b = 1);

// Two runs: every row of `a` matched with the row of `b` with the same backend, implementation and
// problem; rows left over are then matched ignoring the dtype (a Difference of the pair).
Comparison compare_runs(const ResultsFile& a, const ResultsFile& b, const CompareOptions& options);
Comparison compare_runs(const std::vector<Row>& a, const std::vector<Row>& b, const CompareOptions& options);

// One run: every row against the row of the `baseline` implementation (a variant's name names its
// default one, e.g. "standard") with the same backend and problem. Rows of problems without a
// baseline row are listed in only_b; a baseline that no row has is a UsageError.
Comparison compare_to_baseline(const ResultsFile& file, const std::string& baseline, const CompareOptions& options);
Comparison compare_to_baseline(const std::vector<Row>& rows, const std::string& baseline, const CompareOptions& options);

}  // namespace flashbench
