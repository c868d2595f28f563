// The modelled wall time of a sweep's configuration, for dealing configurations to shards.
#include <algorithm>

#include "flashbench/model/model.hpp"

namespace flashbench {

double modelled_run_seconds(const Problem& problem, int implementations, const SamplingPolicy& policy,
                            double flop_rate) {
  const double pass_s = (problem.forward_flop() + problem.backward_flop()) / flop_rate;  // [s]
  const double warmup_s = std::max(policy.warmup * pass_s, policy.warmup_ms / 1e3);
  // needs_more_samples stops after max_time_s, but never before min_samples nor after max_samples.
  const double sampling_s = std::clamp(policy.max_time_s, policy.min_samples * pass_s, policy.max_samples * pass_s);
  return implementations * (warmup_s + pass_s + sampling_s);
}

}  // namespace flashbench
