#pragma once
// The CPU device through the harness, as the command line reaches it: rows for variants, and the
// model its implementations give.
#include <span>
#include <vector>

#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"

namespace flashbench::testing {

// One Runner::run of the CPU's default implementation of each variant with `threads` threads
// (0 = the current OpenMP default); the thread count is restored afterwards.
std::vector<Row> run_cpu(const Problem& problem, std::span<const Variant> variants, const RunOptions& options,
                         int threads = 0);

// Options with no warm-up and one sample per implementation: for tests of what a row holds,
// not of its timing.
RunOptions one_sample_options();

// The model of the CPU's implementations for `threads` threads.
ModelSource cpu_model(int threads);

}  // namespace flashbench::testing
