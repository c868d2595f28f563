#pragma once
// `run --dry-run`: what a run would do, without measuring or writing anything: each configuration
// of this run's share, each implementation's modelled peak and whether it would run or be skipped
// (and why), and the modelled time. The decisions are the runner's own (Runner::plan), so a dry run
// and a real run skip the same rows for the same reasons.
#include <iosfwd>
#include <string_view>
#include <vector>

#include "flashbench/harness/implementation.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/problem.hpp"
#include "flashbench/statistics.hpp"

namespace flashbench::cli {

struct DryRun {
  std::string_view backend;
  double nominal_flop_rate = 0;  // the backend's, for the modelled time [FLOP/s]
  SamplingPolicy sampling;
  int rounds = 1;
  size_t already_done = 0;  // configurations --resume keeps from --out
};

// Plans every problem with `runner` and prints the plan to `out`: a table (format "table"), or one
// JSON document (format "json", docs/json.md "run --dry-run"). Returns the exit code (0).
int print_dry_run(std::ostream& out, std::string_view format, const DryRun& dry_run, Runner& runner,
                  const std::vector<Problem>& problems, const std::vector<Implementation*>& implementations);

}  // namespace flashbench::cli
