#pragma once
// The runner owns the measuring job, once for every device and implementation:
//   pre-flight from the model (everything the process will hold, the harness's own copies included)
//   → `skipped`; unsupported → `skipped`; the float64 reference once per problem; then per
//   implementation: the measured pass (memory, outputs for the check), warm-up and samples under
//   the one stopping rule; the check (nothing compared → `not checked`, never passed);
//   OutOfMemory → `oom`; RuntimeFailure → `failed` with the reason, the sweep going on.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "flashbench/core/result.hpp"
#include "flashbench/core/statistics.hpp"
#include "flashbench/harness/device.hpp"
#include "flashbench/harness/implementation.hpp"

namespace flashbench {

struct RunOptions {
  SamplingPolicy sampling;
  uint64_t seed = 20261129;     // inputs are fresh random numbers from this seed, per problem
  double input_scale = 1;       // Q, K, V are standard normal times this (the logits grow as its square)
  bool check = true;            // compare outputs and gradients with the float64 reference
  int64_t mem_limit_bytes = 0;  // 0 = what the device has available
  bool cold = false;            // flush the device's caches before every pass
  bool record_timeline = false; // keep the ledger's history of the measured pass in Row::timeline (--trace)
  // The most work the float64 reference may take per problem [FLOP]; beyond it the check falls back
  // to sampled rows of the output (L = 1) or says `not checked`.
  double reference_flop_budget = 2.5e11;
  // Name the work as device ranges (`run --profile`, for Nsight): "<impl> <problem>" around each
  // implementation, "<impl> <pass>" around each pass (measured, warm-up, sample, repeat) and
  // "<impl> layer <i> <phase>" around each layer's forward and backward. No '/' in a name: Nsight
  // Compute's --nvtx-include reads '/' as the step from a range to the one nested in it.
  bool name_ranges = false;
  // When the samples should stop (run --time-budget): past `deadline` (the configuration's share) an
  // implementation stops warming up, and sampling once it has --min-samples; past `hard_deadline`
  // (the budget's end) once it has one sample, whatever the stopping rule still wants. The row
  // says where it cut.
  std::optional<std::chrono::steady_clock::time_point> deadline, hard_deadline;
};

class Runner {
 public:
  Runner(Device& device, RunOptions options);

  // One row per implementation, in the order given, all on the same inputs.
  std::vector<Row> run(const Problem& problem, std::span<Implementation* const> implementations);

  // What run() decides before anything is allocated, from the same rules: a row per implementation
  // with its modelled memory, `skipped` with the reason where it is unsupported or its modelled peak
  // does not fit, `ok` where it would be measured (`run --dry-run`).
  std::vector<Row> plan(const Problem& problem, std::span<Implementation* const> implementations);

  // The work of the float64 reference run() computes for `problem` (whole heads, or sampled rows of
  // them; 0 where it checks nothing): with a measured Check::reference_seconds, what the check of
  // another problem will cost [FLOP].
  double reference_flop(const Problem& problem) const;

  // Called by run() as it starts measuring implementation k of the list it was given (progress).
  using StartObserver = std::function<void(const Problem& problem, size_t k)>;
  void on_start(StartObserver observer) { on_start_ = std::move(observer); }
  // The deadlines of the configurations run from now on (RunOptions::deadline, hard_deadline).
  void set_deadlines(std::optional<std::chrono::steady_clock::time_point> deadline,
                     std::optional<std::chrono::steady_clock::time_point> hard_deadline) {
    options_.deadline = deadline;
    options_.hard_deadline = hard_deadline;
  }

  // One layer's inputs on the host, rounded to the problem's dtype on the device: Q and dO
  // [B,H,N,d], K and V [B,G,N_k,d].
  struct HostInputs {
    std::span<const float> Q, K, V, dO;
  };
  // One untimed pass of one implementation on one layer (problem.layers must be 1): O, dQ, dK, dV
  // as float. For `grad` and the tests.
  struct Pass {
    std::vector<float> O, dQ, dK, dV;
  };
  Pass run_once(const Problem& problem, Implementation& implementation, const HostInputs& inputs);

 private:
  Device& device_;
  RunOptions options_;
  StartObserver on_start_;
};

}  // namespace flashbench
