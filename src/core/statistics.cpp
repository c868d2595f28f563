#include "flashbench/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace flashbench {

namespace {
double sorted_median(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}
}  // namespace

double median_noise(const std::vector<double>& samples_ms) {
  const size_t n = samples_ms.size();
  if (n < 3) return 1.0;
  std::vector<double> sorted = samples_ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted_median(sorted);
  if (median <= 0) return 1.0;
  const double half_width_rank = 1.96 * std::sqrt(double(n)) / 2.0;
  const auto clamp_index = [n](double rank) {
    return static_cast<size_t>(std::clamp(rank, 0.0, double(n - 1)));
  };
  const double lower = sorted[clamp_index(std::floor(n / 2.0 - half_width_rank))];
  const double upper = sorted[clamp_index(std::ceil(n / 2.0 + half_width_rank))];
  return 0.5 * (upper - lower) / median;
}

TimingSummary summarize(std::vector<double> samples_ms, double max_noise) {
  TimingSummary s;
  s.samples_ms = std::move(samples_ms);
  const size_t n = s.samples_ms.size();
  if (n == 0) return s;
  std::vector<double> sorted = s.samples_ms;
  std::sort(sorted.begin(), sorted.end());
  s.median_ms = sorted_median(sorted);
  s.min_ms = sorted.front();
  s.max_ms = sorted.back();
  s.mean_ms = std::accumulate(sorted.begin(), sorted.end(), 0.0) / double(n);
  double squares = 0;
  for (double x : sorted) squares += (x - s.mean_ms) * (x - s.mean_ms);
  s.stddev_ms = n > 1 ? std::sqrt(squares / double(n - 1)) : 0.0;
  s.cv = s.mean_ms > 0 ? s.stddev_ms / s.mean_ms : 0.0;
  s.median_noise = median_noise(s.samples_ms);
  s.noisy = s.median_noise > max_noise;
  // A first sample 50% slower than the median signals a cold start the warm-up did not absorb.
  s.first_outlier = n >= 3 && s.samples_ms.front() > 1.5 * s.median_ms;
  return s;
}

bool needs_more_samples(const SamplingPolicy& policy, const std::vector<const std::vector<double>*>& series,
                        double elapsed_s) {
  size_t count = series.empty() ? 0 : series.front()->size();
  if (count < static_cast<size_t>(policy.min_samples)) return true;
  if (count >= static_cast<size_t>(policy.max_samples) || elapsed_s >= policy.max_time_s) return false;
  for (const std::vector<double>* s : series)
    if (median_noise(*s) > policy.max_noise) return true;
  return false;
}

}  // namespace flashbench
