#pragma once
// Summaries of repeated timings, and the rule that decides when to stop repeating.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashbench {

// One sample's GPU clocks as read just after it (the timing protocol; docs/json.md "timing").
struct SampleClock {
  std::optional<unsigned> sm_clock_mhz;
  std::optional<uint64_t> clock_event_reasons;  // NVML's clocks event reason bits
  std::optional<bool> throttled;                // nothing where the readings tell nothing
};

struct TimingSummary {
  std::vector<double> samples_ms;  // in the order they were taken [ms]
  // The statistics below are of every sample, or of the unthrottled ones where some sample ran
  // throttled and at least min_unthrottled known-unthrottled ones remain (excluded_samples > 0).
  double median_ms = 0, mean_ms = 0, stddev_ms = 0, min_ms = 0, max_ms = 0;  // [ms]
  double cv = 0;            // coefficient of variation, stddev / mean
  double median_noise = 0;  // relative half-width of the median's ~95% confidence interval
  bool noisy = false;       // median_noise stayed above the target
  bool first_outlier = false;  // the first sample was far slower than the median (a cold start)
  double noise_target = 0;  // the max_noise the summary was made against
  // run --rounds R: the median of each round, in round order [ms]; empty for a run of one round.
  // Rounds are whole passes over the sweep, so their spread shows variation between runs that the
  // samples of one round, taken back to back, do not.
  std::vector<double> round_medians_ms;
  // Per sample, in samples_ms's order, where the device reads its clocks (a GPU through NVML);
  // empty elsewhere.
  std::vector<SampleClock> clocks;
  std::optional<int64_t> throttled_samples;  // of `clocks`; nothing where none of them told
  int64_t excluded_samples = 0;              // throttled samples the statistics leave out
  int64_t min_unthrottled = 1;               // ... where at least this many unthrottled remain
  std::optional<double> median_unthrottled_ms;
  int64_t count() const { return static_cast<int64_t>(samples_ms.size()); }
  // The samples the statistics are made of: every one, or the unthrottled ones (excluded_samples).
  std::vector<double> summarized_samples() const;
};

// The summary of `samples_ms`; with `clocks` (one per sample, or empty) the throttled samples are
// counted and left out of the statistics where at least `min_unthrottled` unthrottled ones remain,
// as the torch peers' protocol does (scripts/peers/timing.py, summary).
TimingSummary summarize(std::vector<double> samples_ms, double max_noise, std::vector<SampleClock> clocks = {},
                        int64_t min_unthrottled = 1);

// One summary of several rounds of the same measurement: their samples in round order, summarized
// as one series (their clocks with them where every round has them), and each round's median in
// round_medians_ms.
TimingSummary merge_rounds(const std::vector<TimingSummary>& rounds, double max_noise);

// One line per problem with a summary, naming `phase` ("fwd", "bwd"): noise above target,
// an outlying first sample. Empty when the measurement is clean or has no samples.
std::vector<std::string> timing_warnings(const TimingSummary& summary, std::string_view phase);

// The median of `values` (not empty): the middle one, or the mean of the two middle ones.
double median_of(std::vector<double> values);

// Relative half-width of a distribution-free ~95% confidence interval of the median
// (order statistics n/2 ± 1.96·sqrt(n)/2), divided by the median. 1.0 with fewer than 3 samples.
double median_noise(const std::vector<double>& samples_ms);

// When to stop sampling one configuration.
struct SamplingPolicy {
  int warmup = 1;            // untimed runs first
  // ... and at least this long of them [ms]: small configurations need many runs before threads,
  // caches and pages settle (a 0.1 ms first configuration measured 80x its median after 1 run).
  double warmup_ms = 25;
  int min_samples = 5;
  int max_samples = 1000;
  double max_noise = 0.02;   // stop once the median's relative noise is below this
  double max_time_s = 10.0;  // or once this much time went into samples [s]
  // A sample ran throttled when the GPU's SM clock after it is below this fraction of its maximum
  // (or a power / thermal / hardware slowdown held the clock down during it): --throttle-threshold.
  double throttle_threshold = 0.95;
};
inline constexpr int kMinSamplesFloor = 5;  // fewer samples give no confidence interval worth the name
// Ceilings past any real use, so that a typo or a count near INT_MAX is a usage error rather than a
// run that never ends (warm-up runs and the minimum samples are taken whatever the time).
inline constexpr int kMaxWarmupRuns = 10000;
inline constexpr int kMaxSampleCount = 1000000;
inline constexpr double kMaxWarmupMs = 3600e3;   // an hour
inline constexpr double kMaxTimeCeilingS = 86400;  // a day per configuration

// Throws UsageError naming the flag of the first bad field (--warmup, --warmup-time,
// --min-samples, --max-samples, --max-noise, --max-time, --throttle-threshold), below its floor or above
// its ceiling.
void validate(const SamplingPolicy& policy);

// True while more untimed warm-up runs are needed: fewer than policy.warmup runs, or less than
// policy.warmup_ms spent in them. `elapsed_ms` is the time the warm-up runs took so far [ms].
bool needs_more_warmup(const SamplingPolicy& policy, int runs_done, double elapsed_ms);

// True while more samples are needed: fewer than min_samples, or any series still too noisy while
// time and count are left.
bool needs_more_samples(const SamplingPolicy& policy, const std::vector<const std::vector<double>*>& series,
                        double elapsed_s);


// Two-sided Mann-Whitney U test of "samples a and b come from the same distribution", as Google
// Benchmark's compare.py uses it. Exact distribution for small samples without ties, the normal
// approximation with tie and continuity correction otherwise.
struct MannWhitneyResult {
  double u = 0;        // U statistic of `a`
  double p_value = 1;  // two-sided
};
MannWhitneyResult mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace flashbench
