// Timing summaries, the stopping rules, and the Mann-Whitney U test against values computed
// independently with SciPy 1.10 (scipy.stats.mannwhitneyu, two-sided).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <gtest/gtest.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/gpu_state.hpp"
#include "flashbench/core/statistics.hpp"

namespace flashbench {
namespace {

TEST(Summarize, MedianMeanStddevMinMax) {
  const TimingSummary s = summarize({4.0, 1.0, 3.0, 2.0, 5.0}, 0.02);
  EXPECT_DOUBLE_EQ(s.median_ms, 3.0);
  EXPECT_DOUBLE_EQ(s.mean_ms, 3.0);
  EXPECT_DOUBLE_EQ(s.stddev_ms, std::sqrt(2.5));  // sample stddev of 1..5
  EXPECT_DOUBLE_EQ(s.min_ms, 1.0);
  EXPECT_DOUBLE_EQ(s.max_ms, 5.0);
  EXPECT_DOUBLE_EQ(s.cv, std::sqrt(2.5) / 3.0);
  EXPECT_EQ(s.count(), 5);
  EXPECT_EQ(s.samples_ms.front(), 4.0);  // kept in the order taken
}

TEST(Summarize, EvenCountMedianAveragesTheMiddlePair) {
  EXPECT_DOUBLE_EQ(summarize({1.0, 2.0, 3.0, 10.0}, 0.02).median_ms, 2.5);
}

TEST(Summarize, FlagsNoiseAboveTargetAndAColdFirstSample) {
  const TimingSummary steady = summarize({10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0}, 0.02);
  EXPECT_FALSE(steady.noisy);
  EXPECT_FALSE(steady.first_outlier);
  EXPECT_TRUE(timing_warnings(steady, "fwd").empty());

  // 15 samples: the median's interval (ranks 3..12 of 0..14) excludes the one cold sample.
  const TimingSummary cold =
      summarize({30.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.01, 9.99, 10.0, 10.0, 10.01, 9.99, 10.0, 10.0}, 0.02);
  EXPECT_FALSE(cold.noisy);
  EXPECT_TRUE(cold.first_outlier);
  const auto warnings = timing_warnings(cold, "bwd");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "bwd first sample 3.00x the median (cold start; more --warmup?)");

  const TimingSummary noisy = summarize({5.0, 10.0, 15.0, 7.0, 13.0}, 0.02);
  EXPECT_TRUE(noisy.noisy);
  EXPECT_GT(noisy.median_noise, 0.02);
  EXPECT_EQ(noisy.noise_target, 0.02);
}

TEST(MedianNoise, HalfWidthOfTheOrderStatisticInterval) {
  // n = 9: ranks 4.5 ± 1.96·3/2 = 4.5 ± 2.94 -> sorted[1] and sorted[8]; median 5.
  const std::vector<double> samples = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_DOUBLE_EQ(median_noise(samples), 0.5 * (9 - 2) / 5.0);
  EXPECT_DOUBLE_EQ(median_noise({1.0, 2.0}), 1.0);  // too few to say
}

TEST(SamplingPolicy, MinimumSamplesThenNoiseOrTimeOrCount) {
  SamplingPolicy policy;  // min 5, max noise 2%, 10 s
  std::vector<double> series = {1.0, 1.0, 1.0, 1.0};
  EXPECT_TRUE(needs_more_samples(policy, {&series}, 0.0));
  series.push_back(1.0);
  EXPECT_FALSE(needs_more_samples(policy, {&series}, 0.0));  // five identical samples: no noise
  std::vector<double> noisy = {1.0, 2.0, 1.0, 2.0, 1.5};
  EXPECT_TRUE(needs_more_samples(policy, {&series, &noisy}, 1.0));
  EXPECT_FALSE(needs_more_samples(policy, {&series, &noisy}, 10.0));  // out of time
  policy.max_samples = 5;
  EXPECT_FALSE(needs_more_samples(policy, {&series, &noisy}, 1.0));  // out of samples
}

TEST(SamplingPolicy, WarmupByCountAndByTime) {
  SamplingPolicy policy;
  policy.warmup = 2;
  policy.warmup_ms = 100;
  EXPECT_TRUE(needs_more_warmup(policy, 1, 500));
  EXPECT_TRUE(needs_more_warmup(policy, 3, 50));
  EXPECT_FALSE(needs_more_warmup(policy, 2, 100));
  policy.warmup = 0;
  policy.warmup_ms = 0;
  EXPECT_FALSE(needs_more_warmup(policy, 0, 0));
}

TEST(SamplingPolicy, ValidateNamesTheFlag) {
  SamplingPolicy policy;
  EXPECT_NO_THROW(validate(policy));
  const auto message_of = [](SamplingPolicy p) {
    try {
      validate(p);
    } catch (const UsageError& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  SamplingPolicy p = policy;
  p.min_samples = 3;
  EXPECT_NE(message_of(p).find("--min-samples must be from 5 to"), std::string::npos);
  p = policy;
  p.max_noise = 0;
  EXPECT_NE(message_of(p).find("--max-noise"), std::string::npos);
  p = policy;
  p.max_time_s = -1;
  EXPECT_NE(message_of(p).find("--max-time"), std::string::npos);
  p = policy;
  p.max_samples = 4;
  EXPECT_NE(message_of(p).find("--max-samples"), std::string::npos);
  p = policy;
  p.warmup = -1;
  EXPECT_NE(message_of(p).find("--warmup"), std::string::npos);
}

TEST(MannWhitney, ExactSmallSamplesMatchScipy) {
  // mannwhitneyu([1..5], [6..10], method='exact'): U = 0, p = 2/252.
  const MannWhitneyResult separated = mann_whitney_u({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  EXPECT_DOUBLE_EQ(separated.u, 0.0);
  EXPECT_NEAR(separated.p_value, 0.007936507936507936, 1e-12);
  // Interleaved: U = 9, p = 0.32900432900432897.
  const MannWhitneyResult mixed = mann_whitney_u({1.0, 2.5, 3.1, 4.2, 5.9, 6.0}, {2.0, 3.0, 7.5, 8.1, 9.0});
  EXPECT_DOUBLE_EQ(mixed.u, 9.0);
  EXPECT_NEAR(mixed.p_value, 0.32900432900432897, 1e-12);
}

TEST(MannWhitney, TiesUseTheCorrectedNormalApproximation) {
  // method='asymptotic', use_continuity=True: U = 8, p = 0.02228731901455301.
  const MannWhitneyResult r = mann_whitney_u({1, 2, 2, 3, 4, 4, 5}, {3, 4, 4, 5, 6, 7, 7, 8});
  EXPECT_DOUBLE_EQ(r.u, 8.0);
  EXPECT_NEAR(r.p_value, 0.02228731901455301, 1e-12);
}

TEST(MannWhitney, IdenticalSamplesGiveNoEvidence) {
  const std::vector<double> a = {1.0, 1.1, 0.9, 1.05, 0.95};
  EXPECT_DOUBLE_EQ(mann_whitney_u(a, a).p_value, 1.0);
  EXPECT_DOUBLE_EQ(mann_whitney_u({2.0, 2.0, 2.0}, {2.0, 2.0}).p_value, 1.0);
  EXPECT_DOUBLE_EQ(mann_whitney_u({}, {1.0}).p_value, 1.0);
}

}  // namespace
// Throttled samples are counted and left out of the statistics where at least min_unthrottled
// unthrottled ones remain (the torch peers' rule), and kept, counted, where fewer do.
TEST(Statistics, ThrottledSamplesAreLeftOutWhereEnoughRemain) {
  const std::vector<double> samples{10, 20, 11, 30, 12, 10.5, 11.5};
  std::vector<SampleClock> clocks(samples.size());
  for (size_t i = 0; i < clocks.size(); ++i) clocks[i].throttled = samples[i] >= 20;
  const TimingSummary left_out = summarize(samples, 0.02, clocks, 5);
  EXPECT_EQ(left_out.throttled_samples, 2);
  EXPECT_EQ(left_out.excluded_samples, 2);
  EXPECT_DOUBLE_EQ(left_out.median_ms, 11);
  EXPECT_DOUBLE_EQ(left_out.max_ms, 12);
  EXPECT_EQ(left_out.count(), 7);  // samples_ms keeps every sample
  EXPECT_DOUBLE_EQ(*left_out.median_unthrottled_ms, 11);
  const std::vector<std::string> warnings = timing_warnings(left_out, "bwd");
  EXPECT_EQ(std::count_if(warnings.begin(), warnings.end(),
                          [](const std::string& w) {
                            return w.find("bwd 2 of 7 samples ran with the GPU throttled (left out") != std::string::npos;
                          }),
            1);

  const TimingSummary kept = summarize(samples, 0.02, clocks, 6);  // only 5 unthrottled
  EXPECT_EQ(kept.throttled_samples, 2);
  EXPECT_EQ(kept.excluded_samples, 0);
  EXPECT_DOUBLE_EQ(kept.median_ms, 11.5);
  EXPECT_DOUBLE_EQ(kept.max_ms, 30);

  std::vector<SampleClock> unknown(samples.size());  // readings that told nothing
  EXPECT_FALSE(summarize(samples, 0.02, unknown, 5).throttled_samples.has_value());
  EXPECT_THROW(summarize(samples, 0.02, std::vector<SampleClock>(3), 5), std::invalid_argument);

  // Rounds merge with their clocks.
  const TimingSummary merged = merge_rounds({left_out, left_out}, 0.02);
  EXPECT_EQ(merged.throttled_samples, 4);
  EXPECT_EQ(merged.excluded_samples, 4);
  EXPECT_EQ(merged.count(), 14);
}

// The throttling rule of one sample from the states around it.
TEST(Statistics, ASampleIsThrottledByItsClockOrAViolationDuringIt) {
  GpuState before, after;
  EXPECT_FALSE(sample_throttled(before, after, 0.95).has_value());  // nothing read
  after.max_sm_clock_mhz = 1980;
  after.sm_clock_mhz = 1980;
  EXPECT_EQ(sample_throttled(before, after, 0.95), false);
  after.sm_clock_mhz = 1800;
  EXPECT_EQ(sample_throttled(before, after, 0.95), true);
  EXPECT_EQ(sample_throttled(before, after, 0.9), false);
  before.power_violation_ns = 100;
  after.power_violation_ns = 100;
  EXPECT_EQ(sample_throttled(before, after, 0.9), false);
  after.power_violation_ns = 101;
  EXPECT_EQ(sample_throttled(before, after, 0.9), true);
  after.power_violation_ns = 100;
  after.clock_event_reasons = 0x1;  // gpu_idle: not throttling
  EXPECT_EQ(sample_throttled(before, after, 0.9), false);
  after.clock_event_reasons = 0x4;  // sw_power_cap
  EXPECT_EQ(sample_throttled(before, after, 0.9), true);
}

}  // namespace flashbench
