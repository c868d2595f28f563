#include "run_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace flashbench::cli {

RunEstimate::RunEstimate(SamplingPolicy policy, double nominal_flop_rate)
    : policy_(policy), nominal_flop_rate_(nominal_flop_rate) {}

void RunEstimate::learn(const Row& row, double reference_flop) {
  if (row.status != Status::ok || !row.time_budget_cut.empty()) return;
  const double pass_ms = row.fwd.median_ms + row.bwd.median_ms;
  const size_t taken = row.fwd.samples_ms.size();
  // One sample is --profile's (or a run that kept only one): it says nothing of the stopping rule.
  if (pass_ms <= 0 || taken < size_t(std::max(2, policy_.min_samples))) return;
  Learned& learned = implementations_[row.implementation()];
  learned.flop_rate = (row.problem.forward_flop() + row.problem.backward_flop()) / (pass_ms / 1e3);
  // Where the noise target held, the samples it took; where --max-time stopped them short of it,
  // as many as the time allows (infinite).
  const bool held = !row.fwd.noisy && !row.bwd.noisy;
  learned.samples = held ? double(taken) : std::numeric_limits<double>::infinity();
  if (row.check && row.check->reference_seconds && *row.check->reference_seconds > 0 && reference_flop > 0)
    reference_flop_rate_ = reference_flop / *row.check->reference_seconds;
}

double RunEstimate::row_seconds(const Problem& problem, std::string_view impl) const {
  const auto found = implementations_.find(impl);
  const double flop_rate = found != implementations_.end() ? found->second.flop_rate : nominal_flop_rate_;
  const double pass_s = (problem.forward_flop() + problem.backward_flop()) / flop_rate;
  if (!(pass_s > 0)) return 0;
  // The measured pass counts as the first warm-up run; more follow until both the count and the
  // time of --warmup and --warmup-time are reached.
  const double warmup_s = std::max({0.0, (policy_.warmup - 1) * pass_s, policy_.warmup_ms / 1e3 - pass_s});
  // The stopping rule samples until the noise target holds or --max-time is spent (the sample that
  // crosses it included), never fewer than --min-samples nor more than --max-samples.
  const double until_max_time = std::max(1.0, std::ceil(policy_.max_time_s / pass_s));
  const double until_steady = samples_until_steady().value_or(until_max_time);
  const double samples = std::clamp(std::min(until_steady, until_max_time), double(policy_.min_samples),
                                    double(policy_.max_samples));
  return pass_s + warmup_s + samples * pass_s + pass_s;  // measured pass, warm-up, samples, repeat pass
}

std::optional<double> RunEstimate::samples_until_steady() const {
  if (implementations_.empty()) return std::nullopt;
  std::vector<double> samples;
  for (const auto& [impl, learned] : implementations_) samples.push_back(learned.samples);
  const double median = median_of(std::move(samples));
  return std::isfinite(median) ? std::optional<double>(std::ceil(median)) : std::nullopt;
}

double RunEstimate::reference_seconds(double reference_flop) const {
  return reference_flop > 0 && reference_flop_rate_ ? reference_flop / *reference_flop_rate_ : 0;
}

double RunEstimate::configuration_seconds(const Problem& problem, std::span<const std::string> impls,
                                          double reference_flop) const {
  double seconds = reference_seconds(reference_flop);
  for (const std::string& impl : impls) seconds += row_seconds(problem, impl);
  return seconds;
}

std::string RunEstimate::describe() const {
  std::string text;
  for (const auto& [impl, learned] : implementations_)
    text += fmt::format("{}{} {:.3g} GFLOP/s {}", text.empty() ? "" : ", ", impl, learned.flop_rate / 1e9,
                        std::isfinite(learned.samples) ? fmt::format("{:.0f} samples", learned.samples) : "noise-bound");
  if (reference_flop_rate_) text += fmt::format("; float64 check {:.3g} GFLOP/s", *reference_flop_rate_ / 1e9);
  return text;
}

}  // namespace flashbench::cli
