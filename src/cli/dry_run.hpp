#pragma once
// `run --dry-run`: what a run would do, without running it or writing anything: each configuration
// of this run's share, each implementation's modelled peak and whether it would run or be skipped
// (and why), and how long it will take. The decisions are the runner's own (Runner::plan), so a dry
// run and a real run skip the same rows for the same reasons. The time is learned from a probe: the
// largest configuration with N halved until one pass is short, measured by the run's own runner and
// options (--max-time at most a second), whose rates, sample counts and check cost RunEstimate
// carries to every configuration.
#include <iosfwd>
#include <string_view>
#include <vector>

#include "flashbench/core/problem.hpp"
#include "flashbench/core/statistics.hpp"
#include "flashbench/harness/device.hpp"
#include "flashbench/harness/implementation.hpp"
#include "flashbench/harness/runner.hpp"

namespace flashbench::cli {

struct DryRun {
  std::string_view backend;
  double nominal_flop_rate = 0;  // the backend's, for the modelled time [FLOP/s]
  RunOptions options;            // the run's own, for the plan and the probe
  int rounds = 1;
  size_t already_done = 0;  // configurations --resume keeps from --out
};

// Plans every problem on `device`, probes its time and prints the plan to `out`: a table (format
// "table"), or one JSON document (format "json", docs/json.md "run --dry-run"). Returns the exit
// code (0).
int print_dry_run(std::ostream& out, std::string_view format, const DryRun& dry_run, Device& device,
                  const std::vector<Problem>& problems, const std::vector<Implementation*>& implementations);

}  // namespace flashbench::cli
