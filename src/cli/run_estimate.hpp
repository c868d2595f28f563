#pragma once
// How long a run's rows will take on this machine, learned from rows measured on it: a dry run's
// probe, or the configurations a running sweep has finished (its ETA). A row costs its measured
// pass, the warm-up runs, the samples its stopping rule takes and the repeat pass; a configuration
// adds the float64 reference once. What is learned is each implementation's rate (its median
// forward + backward against their FLOP), how many samples its stopping rule took before the noise
// target held (or that --max-time stopped it first), and the reference's rate. That count is itself
// noisy: the rule's first passage below the target, 14 to 89 samples at one size in probes a minute
// apart on the 2-core EPYC, and 4 to 145 between the implementations of one run; how soon the
// target holds is more the machine's than an implementation's, so the median over the
// implementations serves them all, at every size alike (there, quiet, the rule stopped after 36-41
// samples at 13 ms passes, 14-26 at 50 ms, 11-48 at 0.2 s, and --max-time bounded them at 0.8 s).
// A run's time varies with it: the same sweep took 79, 86 and 96 s on three runs there.
// modelled_run_seconds (model.hpp) stays what deals a sweep to shards: a constant of the backend,
// the same in every process of a job array.
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "flashbench/core/problem.hpp"
#include "flashbench/core/result.hpp"
#include "flashbench/core/statistics.hpp"

namespace flashbench::cli {

class RunEstimate {
 public:
  // `nominal_flop_rate`: the backend's, for an implementation nothing was learned of [FLOP/s].
  RunEstimate(SamplingPolicy policy, double nominal_flop_rate);

  // Learns from a row measured on this machine: its implementation's rate and samples, and, where it
  // was checked, the reference's rate (`reference_flop`: the work of that row's reference, from
  // Runner::reference_flop). Rows that did not run to their stopping rule (not ok, cut by
  // --time-budget, --profile's single sample) teach nothing.
  void learn(const Row& row, double reference_flop);
  bool learned() const { return !implementations_.empty(); }

  // One row of implementation `impl` on `problem` [s].
  double row_seconds(const Problem& problem, std::string_view impl) const;
  // The float64 reference of `reference_flop` work [s]; 0 before one was measured.
  double reference_seconds(double reference_flop) const;
  // A configuration: the reference once (where `reference_flop` > 0), then a row per implementation [s].
  double configuration_seconds(const Problem& problem, std::span<const std::string> impls, double reference_flop) const;

  // "v2 163 GFLOP/s, 36 samples; ..." of what was learned, for a dry run's last line.
  std::string describe() const;

 private:
  struct Learned {
    double flop_rate = 0;         // forward + backward FLOP over their median times [FLOP/s]
    double samples = 0;           // until its noise target held; infinite where --max-time stopped them first
  };
  SamplingPolicy policy_;
  double nominal_flop_rate_;
  // The median over the implementations of the samples their noise target needs; empty before any
  // was learned.
  std::optional<double> samples_until_steady() const;

  std::map<std::string, Learned, std::less<>> implementations_;
  std::optional<double> reference_flop_rate_;  // [FLOP/s]
};

}  // namespace flashbench::cli
