// The CPU backend: runs each variant's layer stack on the same random inputs, times forward and
// backward separately, records tagged memory and compares every variant's outputs with `standard`.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <random>

#include <fmt/format.h>

#include "flashbench/backend.hpp"
#include "flashbench/cpu/stack.hpp"
#include "flashbench/errors.hpp"
#include "flashbench/os_memory.hpp"

namespace flashbench {
namespace {

// Outputs of one stack pass that other variants are compared with.
struct Reference {
  Variant variant;
  std::vector<float> output;      // X_L
  std::vector<float> input_grad;  // dX_0
};


// How far a variant's outputs may sit from the reference's. fp32 kernels differ only by summation
// order; 1e-4 is loose enough for N up to 1M and tight enough to catch a wrong mask, a wrong D or a
// missing rescale. With 16-bit storage the variants round different tensors, so the bound is counted
// in units of the format's precision (bf16 2^-8, fp16 2^-11) and grows with the layers it compounds
// over: standard rounds P, v2 rounds O, checkpoint only the activations (measured: 3-6 units per
// layer); v1 rounds the scores S themselves, whose absolute error |S|·unit lands in every exponent
// (measured: 20-30 units per layer at logits of a few units) — what storing logits in 16 bits costs,
// not a kernel error. The tests check every variant against float64 on the rounded inputs.
double check_tolerance(const Problem& problem, Variant variant) {
  if (problem.dtype == Dtype::fp32) return 1e-4;
  const double unit = problem.dtype == Dtype::bf16 ? 1.0 / 256 : 1.0 / 2048;
  const double units_per_layer = variant == Variant::v1 ? 64 : 16;
  return units_per_layer * unit * double(problem.layers);
}

// The ledger refuses allocations beyond --mem-limit (or the memory available), so a run that
// would not fit fails as `oom` before the system is asked.
int64_t ledger_limit(const RunOptions& options) {
  return options.mem_limit_bytes > 0 ? options.mem_limit_bytes : MemoryLedger::kUnlimited;
}

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  std::vector<Row> run(const Problem& problem, std::span<const Variant> variants,
                       const RunOptions& options) override {
    validate(problem);
    if (options.threads > 0) omp_set_num_threads(options.threads);

    // Fresh random inputs per problem, the same for every variant. Never zeros: a zero input hides
    // wrong gradients.
    std::mt19937_64 generator(options.seed ^ std::hash<std::string>{}(problem.describe()));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> X0(problem.qkv_elements()), dO(problem.qkv_elements());
    for (float& x : X0) x = normal(generator);
    for (float& x : dO) x = normal(generator);

    const std::vector<Variant> order = standard_first(variants);

    std::optional<Reference> reference;
    if (options.check && std::find(order.begin(), order.end(), Variant::standard) == order.end())
      reference = standard_reference(problem, options, X0, dO);
    std::vector<Row> rows;
    for (Variant variant : order) {
      Row row = run_variant(problem, variant, options, X0, dO, reference);
      rows.push_back(std::move(row));
    }
    return in_order_of(std::move(rows), variants);
  }

 private:
  // One untimed pass of `standard` on the same inputs, for runs that did not ask for it.
  static std::optional<Reference> standard_reference(const Problem& problem, const RunOptions& options,
                                                     const std::vector<float>& X0, const std::vector<float>& dO) {
    MemoryLedger ledger(ledger_limit(options));
    try {
      HostAllocator allocator(ledger);
      const cpu::StackInputs inputs = cpu::make_stack_inputs(problem, X0, dO, allocator);
      cpu::StackPass pass = cpu::run_stack(Variant::standard, problem, cpu::Tiling{}, inputs, allocator, true);
      return Reference{Variant::standard, std::move(pass.output), std::move(pass.input_grad)};
    } catch (const OutOfMemory&) {
      return std::nullopt;
    } catch (const std::bad_alloc&) {
      return std::nullopt;
    }
  }

  Row run_variant(const Problem& problem, Variant variant, const RunOptions& options, const std::vector<float>& X0,
                  const std::vector<float>& dO, std::optional<Reference>& reference) {
    Row row;
    row.backend = "cpu";
    row.variant = variant;
    row.problem = problem;
    row.threads = omp_get_max_threads();
    const cpu::Tiling tiling;
    row.row_block = tiling.row_block;
    row.col_block = tiling.col_block;
    if (variant == Variant::v2) row.diagonal_block = tiling.diagonal_block;  // the others have no pieces
    MemoryLedger ledger(ledger_limit(options));
    try {
      // The OS cross-check covers this variant alone: the resident set's high-water mark from here
      // on, above what was resident before its first allocation.
      const bool os_peak_reset = reset_peak_resident_bytes();
      const std::optional<int64_t> resident_before = resident_bytes();
      HostAllocator allocator(ledger);
      const cpu::StackInputs inputs = cpu::make_stack_inputs(problem, X0, dO, allocator);

      std::vector<double> fwd_ms, bwd_ms;
      const SamplingPolicy& policy = options.sampling;
      int warmups_done = 0;
      double warmup_ms = 0;
      bool captured = false;
      auto sample_start = std::chrono::steady_clock::now();
      auto seconds_sampling = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - sample_start).count();
      };
      while (true) {
        const bool warming_up = needs_more_warmup(policy, warmups_done, warmup_ms);
        if (!warming_up && !needs_more_samples(policy, {&fwd_ms, &bwd_ms}, seconds_sampling())) break;
        ledger.set_phase(Phase::fwd);
        ledger.reset_peaks();
        cpu::StackPass pass = cpu::run_stack(variant, problem, tiling, inputs, allocator, !captured);
        if (!captured) {
          captured = true;
          record_check(row, variant, problem, options, X0, std::move(pass.output), std::move(pass.input_grad),
                       reference);
        }
        row.measured.kept_bytes = pass.kept_bytes;
        if (warming_up) {
          ++warmups_done;
          warmup_ms += pass.fwd_ms + pass.bwd_ms;
          if (!needs_more_warmup(policy, warmups_done, warmup_ms)) sample_start = std::chrono::steady_clock::now();
          continue;
        }
        fwd_ms.push_back(pass.fwd_ms);
        bwd_ms.push_back(pass.bwd_ms);
      }
      const std::optional<int64_t> resident_peak = peak_resident_bytes();
      if (os_peak_reset && resident_before && resident_peak)
        row.measured.os_peak_bytes = *resident_peak - *resident_before;
      row.fwd = summarize(std::move(fwd_ms), policy.max_noise);
      row.bwd = summarize(std::move(bwd_ms), policy.max_noise);
      row.measured.peak_bytes = ledger.peak_bytes();
      row.measured.peak_phase = ledger.peak_phase();
      row.measured.by_tag = ledger.at_peak();
      row.measured.high_water = ledger.high_water();
      if (row.check && !row.check->passed()) {
        row.status = Status::failed;
        row.reason = fmt::format("outputs differ from {} by {:.2e} (tolerance {:.0e})", row.check->reference,
                                 row.check->max_rel_err, row.check->tolerance);
      }
    } catch (const OutOfMemory& e) {
      row.status = Status::oom;
      row.reason = e.what();
    } catch (const std::bad_alloc&) {
      row.status = Status::oom;
      row.reason = "the system refused an allocation";
    }
    return row;
  }

  // The first variant to run becomes the reference for the others (standard when asked for). Its
  // own output is spot-checked against float64 on a few rows when L = 1 (a row of O needs only its
  // row of S); deeper stacks have no cheap independent reference, and the test suite covers them.
  static void record_check(Row& row, Variant variant, const Problem& problem, const RunOptions& options,
                           const std::vector<float>& X0, std::vector<float> output, std::vector<float> input_grad,
                           std::optional<Reference>& reference) {
    if (!options.check) return;
    if (reference) {
      const double error = std::max(max_relative_error(output, reference->output),
                                    max_relative_error(input_grad, reference->input_grad));
      row.check = Check{std::string(to_string(reference->variant)), error, check_tolerance(problem, variant)};
      return;
    }
    if (problem.layers == 1)
      row.check = Check{"float64 rows", float64_row_error(problem, stored_values(problem.dtype, X0), output),
                        check_tolerance(problem, variant)};
    reference = Reference{variant, std::move(output), std::move(input_grad)};
  }

  // The values the kernels see after the inputs were stored in `dtype`.
  static std::vector<float> stored_values(Dtype dtype, const std::vector<float>& x) {
    if (dtype == Dtype::fp32) return x;
    std::vector<cpu::Half> stored(x.size());
    std::vector<float> widened(x.size());
    cpu::round_to_storage(dtype, x.data(), stored.data(), int64_t(x.size()));
    cpu::widen_from_storage(dtype, stored.data(), widened.data(), int64_t(x.size()));
    return widened;
  }

  // max |O − O64| / max |O64| over up to 16 rows spread over heads and positions, where O64 is one
  // layer of attention with Q = K = V = X0 computed in double.
  static double float64_row_error(const Problem& problem, const std::vector<float>& X0,
                                  const std::vector<float>& output) {
    const int64_t BH = problem.heads_total(), N = problem.seq, d = problem.head_dim;
    const double scale = 1.0 / std::sqrt(double(d));
    double max_diff = 0, max_ref = 0;
    std::vector<double> weights(N), row(d);
    for (int sample = 0; sample < 16; ++sample) {
      const int64_t h = sample % BH, i = (sample * 7919 + N - 1) % N;  // the last row, then spread out
      const float* X = X0.data() + h * N * d;
      const int64_t visible = problem.causal ? i + 1 : N;
      double row_max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < d; ++k) dot += double(X[i * d + k]) * double(X[j * d + k]);
        weights[j] = scale * dot;
        row_max = std::max(row_max, weights[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j) sum += weights[j] = std::exp(weights[j] - row_max);
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t j = 0; j < visible; ++j)
        for (int64_t k = 0; k < d; ++k) row[k] += weights[j] / sum * double(X[j * d + k]);
      for (int64_t k = 0; k < d; ++k) {
        const double got = output[(h * N + i) * d + k];
        max_diff = std::max(max_diff, std::isnan(got) ? INFINITY : std::fabs(got - row[k]));
        max_ref = std::max(max_ref, std::fabs(row[k]));
      }
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
  }

};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  // Large blocks get pages of their own, so each variant's VmHWM rises with what it touches instead
  // of reusing resident heap pages that an earlier variant freed.
  use_fresh_pages_for_large_blocks();
  return std::make_unique<CpuBackend>();
}

}  // namespace flashbench
