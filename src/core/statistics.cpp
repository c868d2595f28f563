#include "flashbench/core/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"

namespace flashbench {

namespace {
double sorted_median(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}
}  // namespace

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return sorted_median(values);
}

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

std::vector<double> TimingSummary::summarized_samples() const {
  if (excluded_samples == 0 || clocks.size() != samples_ms.size()) return samples_ms;
  std::vector<double> kept;
  for (size_t i = 0; i < samples_ms.size(); ++i)
    if (clocks[i].throttled == false) kept.push_back(samples_ms[i]);
  return kept;
}

TimingSummary summarize(std::vector<double> samples_ms, double max_noise, std::vector<SampleClock> clocks,
                        int64_t min_unthrottled) {
  TimingSummary s;
  s.samples_ms = std::move(samples_ms);
  s.noise_target = max_noise;
  s.min_unthrottled = std::max<int64_t>(1, min_unthrottled);
  if (!clocks.empty() && clocks.size() != s.samples_ms.size())
    throw std::invalid_argument(fmt::format("{} clock readings for {} samples", clocks.size(), s.samples_ms.size()));
  s.clocks = std::move(clocks);
  const size_t n_all = s.samples_ms.size();
  if (n_all == 0) return s;
  std::vector<double> unthrottled;
  int64_t throttled = 0;
  bool known = false;
  for (size_t i = 0; i < s.clocks.size(); ++i) {
    if (!s.clocks[i].throttled) continue;
    known = true;
    if (*s.clocks[i].throttled) ++throttled;
    else unthrottled.push_back(s.samples_ms[i]);
  }
  if (known) s.throttled_samples = throttled;
  if (!unthrottled.empty()) {
    std::vector<double> sorted = unthrottled;
    std::sort(sorted.begin(), sorted.end());
    s.median_unthrottled_ms = sorted_median(sorted);
  }
  const bool exclude = throttled > 0 && int64_t(unthrottled.size()) >= s.min_unthrottled;
  if (exclude) s.excluded_samples = int64_t(n_all - unthrottled.size());
  const std::vector<double>& kept = exclude ? unthrottled : s.samples_ms;
  const size_t n = kept.size();
  std::vector<double> sorted = kept;
  std::sort(sorted.begin(), sorted.end());
  s.median_ms = sorted_median(sorted);
  s.min_ms = sorted.front();
  s.max_ms = sorted.back();
  s.mean_ms = std::accumulate(sorted.begin(), sorted.end(), 0.0) / double(n);
  double squares = 0;
  for (double x : sorted) squares += (x - s.mean_ms) * (x - s.mean_ms);
  s.stddev_ms = n > 1 ? std::sqrt(squares / double(n - 1)) : 0.0;
  s.cv = s.mean_ms > 0 ? s.stddev_ms / s.mean_ms : 0.0;
  s.median_noise = median_noise(kept);
  s.noisy = s.median_noise > max_noise;
  // A first sample 50% slower than the median signals a cold start the warm-up did not absorb.
  s.first_outlier = n_all >= 3 && s.samples_ms.front() > 1.5 * s.median_ms;
  return s;
}

TimingSummary merge_rounds(const std::vector<TimingSummary>& rounds, double max_noise) {
  std::vector<double> samples;
  std::vector<SampleClock> clocks;
  bool every_round_clocked = !rounds.empty();
  int64_t min_unthrottled = 1;
  for (const TimingSummary& round : rounds) {
    samples.insert(samples.end(), round.samples_ms.begin(), round.samples_ms.end());
    clocks.insert(clocks.end(), round.clocks.begin(), round.clocks.end());
    every_round_clocked = every_round_clocked && round.clocks.size() == round.samples_ms.size() && !round.clocks.empty();
    min_unthrottled = std::max(min_unthrottled, round.min_unthrottled);
  }
  if (!every_round_clocked) clocks.clear();
  TimingSummary merged = summarize(std::move(samples), max_noise, std::move(clocks), min_unthrottled);
  for (const TimingSummary& round : rounds) merged.round_medians_ms.push_back(round.median_ms);
  return merged;
}

std::vector<std::string> timing_warnings(const TimingSummary& summary, std::string_view phase) {
  std::vector<std::string> warnings;
  if (summary.count() == 0) return warnings;
  if (summary.noisy)
    warnings.push_back(fmt::format("{} noise {:.2f}% above the {:.2f}% target after {}", phase,
                                   100 * summary.median_noise, 100 * summary.noise_target,
                                   counted(summary.count(), "sample")));
  if (summary.first_outlier)
    warnings.push_back(fmt::format("{} first sample {:.2f}x the median (cold start; more --warmup?)", phase,
                                   summary.samples_ms.front() / summary.median_ms));
  if (summary.throttled_samples && *summary.throttled_samples > 0)
    warnings.push_back(fmt::format("{} {} of {} samples ran with the GPU throttled ({})", phase,
                                   *summary.throttled_samples, summary.count(),
                                   summary.excluded_samples > 0
                                       ? "left out of the statistics"
                                       : fmt::format("kept: fewer than {} ran unthrottled", summary.min_unthrottled)));
  return warnings;
}

void validate(const SamplingPolicy& policy) {
  if (policy.warmup < 0 || policy.warmup > kMaxWarmupRuns)
    throw UsageError(fmt::format("--warmup must be from 0 to {} (got {})", kMaxWarmupRuns, policy.warmup));
  if (!(policy.warmup_ms >= 0 && policy.warmup_ms <= kMaxWarmupMs))
    throw UsageError(fmt::format("--warmup-time must be from 0 to {} ms (got {})", kMaxWarmupMs, policy.warmup_ms));
  if (policy.min_samples < kMinSamplesFloor || policy.min_samples > kMaxSampleCount)
    throw UsageError(fmt::format("--min-samples must be from {} to {} (got {})", kMinSamplesFloor, kMaxSampleCount,
                                 policy.min_samples));
  if (policy.max_samples < policy.min_samples)
    throw UsageError(fmt::format("--max-samples {} is below --min-samples {}", policy.max_samples, policy.min_samples));
  if (policy.max_samples > kMaxSampleCount)
    throw UsageError(fmt::format("--max-samples must be at most {} (got {})", kMaxSampleCount, policy.max_samples));
  if (!(policy.max_noise > 0 && policy.max_noise < 1))
    throw UsageError(fmt::format("--max-noise must be a fraction in (0, 1), e.g. 0.02 (got {})", policy.max_noise));
  if (!(policy.max_time_s > 0 && policy.max_time_s <= kMaxTimeCeilingS))
    throw UsageError(fmt::format("--max-time must be positive and at most {} [s] (got {})", kMaxTimeCeilingS,
                                 policy.max_time_s));
  if (!(policy.throttle_threshold >= 0 && policy.throttle_threshold <= 1))
    throw UsageError(fmt::format("--throttle-threshold must be a fraction in [0, 1], e.g. 0.95 (got {})",
                                 policy.throttle_threshold));
}

bool needs_more_warmup(const SamplingPolicy& policy, int runs_done, double elapsed_ms) {
  return runs_done < policy.warmup || elapsed_ms < policy.warmup_ms;
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

namespace {
// Number of orderings of m "a" and n "b" values (no ties) whose U statistic equals u, for all u:
// f(m, n, u) = f(m-1, n, u-n) + f(m, n-1, u), with a and b counted by how many b each a beats.
std::vector<double> u_distribution(int m, int n) {
  // table[j][u] holds f(i, j, u) for the current i.
  const int max_u = m * n;
  std::vector<std::vector<double>> table(n + 1, std::vector<double>(max_u + 1, 0.0));
  for (int j = 0; j <= n; ++j) table[j][0] = 1.0;  // i = 0: one ordering, U = 0
  for (int i = 1; i <= m; ++i) {
    std::vector<std::vector<double>> next(n + 1, std::vector<double>(max_u + 1, 0.0));
    next[0][0] = 1.0;
    for (int j = 1; j <= n; ++j)
      for (int u = 0; u <= max_u; ++u)
        next[j][u] = (u >= j ? table[j][u - j] : 0.0) + next[j - 1][u];
    table = std::move(next);
  }
  return table[n];
}
constexpr int kExactLimit = 25;  // exact distribution up to this many samples per side
}  // namespace

MannWhitneyResult mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b) {
  MannWhitneyResult result;
  const size_t n1 = a.size(), n2 = b.size();
  if (n1 == 0 || n2 == 0) return result;

  // Midranks of the pooled samples; tie groups feed the variance correction.
  std::vector<std::pair<double, int>> pooled;
  pooled.reserve(n1 + n2);
  for (double x : a) pooled.emplace_back(x, 0);
  for (double x : b) pooled.emplace_back(x, 1);
  std::sort(pooled.begin(), pooled.end());
  const size_t n = pooled.size();
  double rank_sum_a = 0, tie_term = 0;  // tie_term = Σ (t³ − t) over tie groups
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && pooled[j].first == pooled[i].first) ++j;
    const double midrank = 0.5 * double(i + 1 + j);  // ranks i+1 .. j
    for (size_t k = i; k < j; ++k)
      if (pooled[k].second == 0) rank_sum_a += midrank;
    const double t = double(j - i);
    tie_term += t * t * t - t;
    i = j;
  }
  result.u = rank_sum_a - double(n1) * double(n1 + 1) / 2.0;
  const double mean_u = double(n1) * double(n2) / 2.0;

  if (tie_term == 0 && n1 <= kExactLimit && n2 <= kExactLimit) {
    const std::vector<double> counts = u_distribution(int(n1), int(n2));
    const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    const int u = static_cast<int>(std::lround(result.u));
    double at_most = 0, at_least = 0;
    for (int k = 0; k < int(counts.size()); ++k) {
      if (k <= u) at_most += counts[k];
      if (k >= u) at_least += counts[k];
    }
    result.p_value = std::min(1.0, 2.0 * std::min(at_most, at_least) / total);
    return result;
  }
  const double variance = double(n1) * double(n2) / 12.0 *
                          (double(n + 1) - tie_term / (double(n) * double(n - 1)));
  if (variance <= 0) return result;  // every value equal: no evidence of a difference
  const double z = std::max(0.0, std::abs(result.u - mean_u) - 0.5) / std::sqrt(variance);
  result.p_value = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return result;
}

}  // namespace flashbench
