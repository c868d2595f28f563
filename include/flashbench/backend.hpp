#pragma once
// A backend runs the layer stack of every requested variant on one problem, with the same inputs,
// and returns one row per variant. The CPU backend lives in src/cpu, the CUDA one in src/cuda.
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "flashbench/result.hpp"
#include "flashbench/statistics.hpp"
#include "flashbench/variant.hpp"

namespace flashbench {

struct RunOptions {
  SamplingPolicy sampling;
  int threads = 0;              // CPU threads; 0 = OpenMP's default
  uint64_t seed = 20261129;     // inputs are fresh random numbers from this seed, per problem
  bool check = true;            // compare outputs and gradients with `standard` on the same inputs
  int64_t mem_limit_bytes = 0;  // 0 = no limit beyond the machine
  bool cold = false;            // flush caches between samples (CUDA: L2)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual std::vector<Row> run(const Problem& problem, std::span<const Variant> variants,
                               const RunOptions& options) = 0;
};

// The order a backend runs `variants` in: `standard` first, so that the others can be checked
// against its outputs.
std::vector<Variant> standard_first(std::span<const Variant> variants);
// `rows` in the order of `variants`: how a backend returns them, and how `run` reports them.
std::vector<Row> in_order_of(std::vector<Row> rows, std::span<const Variant> variants);

std::unique_ptr<Backend> make_cpu_backend();
// Throws UsageError when this binary has no CUDA backend or the machine has no CUDA device.
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace flashbench
