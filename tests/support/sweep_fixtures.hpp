#pragma once
// Small sweeps, hand-made rows and usage errors, shared by the sweep, shard and merge tests.
#include <functional>
#include <string>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/result.hpp"
#include "flashbench/core/sweep.hpp"

namespace flashbench::testing {

// The message of the UsageError that `action` throws, or "(no UsageError)".
inline std::string usage_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no UsageError)";
}

// 12 configurations (N = 64, 128, 256; H = 1, 2; d = 16; both masks) of standard and v2, on 1 thread.
inline SweepSpec small_sweep() {
  SweepSpec spec;
  spec.seq = {64, 128, 256};
  spec.heads = {1, 2};
  spec.head_dim = {16};
  spec.causal = {false, true};
  spec.variants = {Variant::standard, Variant::v2};
  spec.sampling.max_time_s = 0.5;
  spec.threads = 1;
  return spec;
}

// A CPU row of `impl` ("standard" or a v2 implementation) on `problem`, with nothing measured.
inline Row row_of(const Problem& problem, const std::string& impl, Status status = Status::ok) {
  Row row;
  row.backend = "cpu";
  row.variant = impl == "standard" ? Variant::standard : Variant::v2;
  row.impl = impl;
  row.problem = problem;
  row.status = status;
  return row;
}

}  // namespace flashbench::testing
