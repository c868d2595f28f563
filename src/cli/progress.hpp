#pragma once
// `run`'s progress on stderr: a line per implementation as it starts, with how much of the sweep's
// work is done and an ETA. Rows are weighted by their modelled time (their FLOP at the backend's
// nominal rate under the stopping rule: modelled_run_seconds), so that a sweep whose last
// configurations are the largest does not promise to finish early.
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "flashbench/problem.hpp"

namespace flashbench::cli {

// "4s", "2m05s", "1h02m"
std::string format_eta(double seconds);

class SweepProgress {
 public:
  // `weights`: one per configuration, the modelled work of one of its implementations [s];
  // `implementations` of each, `rounds` passes over them all. `terminal`: rewrite one line in place
  // (a tty); otherwise a line each (--progress into a pipe or a file).
  SweepProgress(std::FILE* stream, bool terminal, std::vector<double> weights, size_t implementations, int rounds);

  // Implementation `k` (named `impl`) of configuration `index` starts, in `round` (0-based).
  void starting(size_t index, int round, size_t k, std::string_view impl, const Problem& problem);
  // Clears the line in place (a tty) before anything else is printed; the next starting() draws it
  // again.
  void clear();
  // Clears the line in place (a tty) once the sweep is over.
  void finish();

 private:
  double done_before(size_t index, int round, size_t k) const;  // [modelled s]

  std::FILE* stream_;
  bool terminal_;
  std::vector<double> weights_;
  std::vector<double> cumulative_;  // cumulative_[i]: the weight of configurations before i, one round
  size_t implementations_;
  int rounds_;
  double total_ = 0;  // every row of every round [modelled s]
  std::chrono::steady_clock::time_point start_;
};

}  // namespace flashbench::cli
