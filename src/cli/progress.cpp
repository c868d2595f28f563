#include "cli/progress.hpp"

#include <cmath>

#include <fmt/format.h>

namespace flashbench::cli {

std::string format_eta(double seconds) {
  if (seconds < 60) return fmt::format("{:.0f}s", seconds);
  if (seconds < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(seconds / 60), std::fmod(seconds, 60.0));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(seconds / 3600), std::floor(std::fmod(seconds, 3600.0) / 60));
}

SweepProgress::SweepProgress(std::FILE* stream, bool terminal, std::vector<double> weights, size_t implementations,
                             int rounds)
    : stream_(stream), terminal_(terminal), weights_(std::move(weights)), implementations_(implementations),
      rounds_(rounds), start_(std::chrono::steady_clock::now()) {
  double sum = 0;
  for (double weight : weights_) {
    cumulative_.push_back(sum);
    sum += weight;
  }
  total_ = sum * double(implementations_) * rounds_;
}

double SweepProgress::done_before(size_t index, int round, size_t k) const {
  const double one_round = total_ / rounds_;
  return round * one_round + (cumulative_[index] * double(implementations_)) + double(k) * weights_[index];
}

void SweepProgress::starting(size_t index, int round, size_t k, std::string_view impl, const Problem& problem) {
  const double done = done_before(index, round, k);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // The rate so far, in modelled seconds of work per second, carries the rest: no estimate before
  // any work is done.
  const std::string eta = done > 0 && elapsed > 0 ? " ETA " + format_eta(elapsed / done * (total_ - done)) : "";
  const std::string rounds = rounds_ > 1 ? fmt::format(" round {}/{}", round + 1, rounds_) : "";
  const std::string line = fmt::format("[{}/{}]{} {:.0f}% {} {}{}", index + 1, weights_.size(), rounds,
                                       total_ > 0 ? 100 * done / total_ : 0.0, impl, problem.describe(), eta);
  if (terminal_) fmt::print(stream_, "\r\033[K{}", line);
  else fmt::print(stream_, "progress: {}\n", line);
  std::fflush(stream_);
}

void SweepProgress::clear() {
  if (terminal_) fmt::print(stream_, "\r\033[K");
  std::fflush(stream_);
}

void SweepProgress::finish() { clear(); }

}  // namespace flashbench::cli
