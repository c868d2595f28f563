#include "progress.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace flashbench::cli {

std::string format_eta(double seconds) {
  seconds = std::round(seconds);  // 119.6 s is "2m00s", not "1m60s"
  if (seconds < 60) return fmt::format("{:.0f}s", seconds);
  if (seconds < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(seconds / 60), std::fmod(seconds, 60.0));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(seconds / 3600), std::floor(std::fmod(seconds, 3600.0) / 60));
}

SweepProgress::SweepProgress(std::FILE* stream, bool terminal, std::vector<Configuration> configurations,
                             std::vector<std::string> impls, int rounds, RunEstimate estimate)
    : stream_(stream), terminal_(terminal), configurations_(std::move(configurations)), impls_(std::move(impls)),
      rounds_(rounds), estimate_(std::move(estimate)), start_(std::chrono::steady_clock::now()) {
  double sum = 0;
  for (const Configuration& configuration : configurations_) {
    cumulative_.push_back(sum);
    sum += configuration.modelled_seconds;
  }
  modelled_total_ = sum * double(impls_.size()) * rounds_;
}

double SweepProgress::modelled_done_before(size_t index, int round, size_t k) const {
  const double one_round = modelled_total_ / rounds_;
  return round * one_round + (cumulative_[index] * double(impls_.size())) +
         double(k) * configurations_[index].modelled_seconds;
}

double SweepProgress::estimated_seconds(size_t index, int round) const {
  const Configuration& configuration = configurations_[index];
  return estimate_.configuration_seconds(configuration.problem, impls_, round == 0 ? configuration.reference_flop : 0);
}

double SweepProgress::elapsed_since(std::chrono::steady_clock::time_point since) const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

void SweepProgress::starting(size_t index, int round, size_t k, std::string_view impl, const Problem& problem) {
  if (index != current_index_ || round != current_round_) {
    current_index_ = index;
    current_round_ = round;
    current_start_ = std::chrono::steady_clock::now();
  }
  double share = modelled_total_ > 0 ? modelled_done_before(index, round, k) / modelled_total_ : 0.0;
  std::string eta;
  if (estimate_.learned()) {
    // What this configuration round still has to do, then every one after it.
    double remaining = std::max(0.0, estimated_seconds(index, round) - elapsed_since(current_start_));
    for (int r = round; r < rounds_; ++r)
      for (size_t i = r == round ? index + 1 : 0; i < configurations_.size(); ++i) remaining += estimated_seconds(i, r);
    const double elapsed = elapsed_since(start_);
    share = elapsed + remaining > 0 ? elapsed / (elapsed + remaining) : share;
    eta = " ETA " + format_eta(remaining);
  }
  const std::string rounds = rounds_ > 1 ? fmt::format(" round {}/{}", round + 1, rounds_) : "";
  const std::string line = fmt::format("[{}/{}]{} {:.0f}% {} {}{}", index + 1, configurations_.size(), rounds,
                                       100 * share, impl, problem.describe(), eta);
  if (terminal_) fmt::print(stream_, "\r\033[K{}", line);
  else fmt::print(stream_, "progress: {}\n", line);
  std::fflush(stream_);
}

void SweepProgress::finished(size_t index, int round, const std::vector<Row>& rows) {
  for (const Row& row : rows) estimate_.learn(row, round == 0 ? configurations_[index].reference_flop : 0);
}

void SweepProgress::clear() {
  if (terminal_) fmt::print(stream_, "\r\033[K");
  std::fflush(stream_);
}

void SweepProgress::finish() { clear(); }

}  // namespace flashbench::cli
