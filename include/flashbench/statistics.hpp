#pragma once
// Summaries of repeated timings, and the rule that decides when to stop repeating.
#include <cstdint>
#include <vector>

namespace flashbench {

struct TimingSummary {
  std::vector<double> samples_ms;  // in the order they were taken [ms]
  double median_ms = 0, mean_ms = 0, stddev_ms = 0, min_ms = 0, max_ms = 0;  // [ms]
  double cv = 0;            // coefficient of variation, stddev / mean
  double median_noise = 0;  // relative half-width of the median's ~95% confidence interval
  bool noisy = false;       // median_noise stayed above the target
  bool first_outlier = false;  // the first sample was far slower than the median (a cold start)
  int64_t count() const { return static_cast<int64_t>(samples_ms.size()); }
};

TimingSummary summarize(std::vector<double> samples_ms, double max_noise);

// Relative half-width of a distribution-free ~95% confidence interval of the median
// (order statistics n/2 ± 1.96·sqrt(n)/2), divided by the median. 1.0 with fewer than 3 samples.
double median_noise(const std::vector<double>& samples_ms);

// When to stop sampling one configuration.
struct SamplingPolicy {
  int warmup = 1;            // untimed runs first
  double warmup_ms = 0;      // ... and at least this long of them [ms]
  int min_samples = 5;
  int max_samples = 1000;
  double max_noise = 0.02;   // stop once the median's relative noise is below this
  double max_time_s = 10.0;  // or once this much time went into samples [s]
};

// True while more samples are needed: fewer than min_samples, or any series still too noisy while
// time and count are left.
bool needs_more_samples(const SamplingPolicy& policy, const std::vector<const std::vector<double>*>& series,
                        double elapsed_s);

}  // namespace flashbench
