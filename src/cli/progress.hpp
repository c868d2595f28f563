#pragma once
// `run`'s progress on stderr: a line per implementation as it starts, with how much of the sweep is
// done and an ETA. The ETA is learned from the configurations already finished (RunEstimate: each
// implementation's rate and samples, the check's cost) and carried to those still to run; before
// any has finished there is none, and the share done is that of the modelled work (FLOP at the
// backend's nominal rate under the stopping rule: modelled_run_seconds).
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "run_estimate.hpp"
#include "flashbench/core/problem.hpp"
#include "flashbench/core/result.hpp"

namespace flashbench::cli {

// "4s", "2m05s", "1h02m"
std::string format_eta(double seconds);

class SweepProgress {
 public:
  // One configuration of the sweep, in the order it runs.
  struct Configuration {
    Problem problem;
    double modelled_seconds = 0;  // one implementation's modelled work, for the share before any is done [s]
    double reference_flop = 0;    // its check's work (Runner::reference_flop), in its first round [FLOP]
  };
  // `impls` of each configuration, `rounds` passes over them all; `estimate` learns from what
  // finishes. `terminal`: rewrite one line in place (a tty); otherwise a line each (--progress into
  // a pipe or a file).
  SweepProgress(std::FILE* stream, bool terminal, std::vector<Configuration> configurations,
                std::vector<std::string> impls, int rounds, RunEstimate estimate);

  // Implementation `k` (named `impl`) of configuration `index` starts, in `round` (0-based).
  void starting(size_t index, int round, size_t k, std::string_view impl, const Problem& problem);
  // Configuration `index` finished `round` with these rows: what they measured carries the ETA.
  void finished(size_t index, int round, const std::vector<Row>& rows);
  // Clears the line in place (a tty) before anything else is printed; the next starting() draws it
  // again.
  void clear();
  // Clears the line in place (a tty) once the sweep is over.
  void finish();

 private:
  double modelled_done_before(size_t index, int round, size_t k) const;  // [modelled s]
  // The estimated seconds of configuration `index` in `round` (the first is checked) [s].
  double estimated_seconds(size_t index, int round) const;
  double elapsed_since(std::chrono::steady_clock::time_point since) const;

  std::FILE* stream_;
  bool terminal_;
  std::vector<Configuration> configurations_;
  std::vector<std::string> impls_;
  int rounds_;
  RunEstimate estimate_;
  std::vector<double> cumulative_;  // cumulative_[i]: the modelled work of configurations before i, one round
  double modelled_total_ = 0;       // every row of every round [modelled s]
  std::chrono::steady_clock::time_point start_;
  // The configuration round under way: which, and when it began.
  size_t current_index_ = 0;
  int current_round_ = -1;
  std::chrono::steady_clock::time_point current_start_;
};

}  // namespace flashbench::cli
