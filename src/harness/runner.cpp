#include "flashbench/harness/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <new>

#include <fmt/format.h>

#include "flashbench/errors.hpp"
#include "flashbench/harness/reference.hpp"
#include "flashbench/harness/stack.hpp"
#include "flashbench/model.hpp"
#include "flashbench/report.hpp"
#include "flashbench/os_memory.hpp"
#include "flashbench/units.hpp"

namespace flashbench {

namespace {

// Which part of a problem the float64 reference covers: the whole stack on a few heads (the stack's
// heads never mix), sampled rows of the output when one layer's whole head is over the budget, or
// nothing, with the reason.
struct ReferencePlan {
  enum class Kind { none, stack, rows } kind = Kind::none;
  std::vector<int64_t> heads;  // flattened B·H indices
  std::vector<int64_t> rows;   // Kind::rows: rows of heads[0]
  std::string not_checked;     // Kind::none: why
  int64_t working_bytes = 0;   // host memory while it is computed [bytes]
  int64_t kept_bytes = 0;      // host memory it and the captured outputs hold afterwards [bytes]
};

ReferencePlan plan_reference(const Problem& p, const RunOptions& options) {
  ReferencePlan plan;
  if (!options.check) return plan;
  const int64_t BH = p.heads_total(), N = p.seq, d = p.head_dim;
  const double budget = options.reference_flop_budget;
  // The first and the last head: an indexing error past head 0 shows in the last.
  for (int64_t heads : {std::min<int64_t>(BH, 2), int64_t{1}}) {
    if (reference_stack_flop(p, heads) > budget) continue;
    plan.kind = ReferencePlan::Kind::stack;
    plan.heads = heads == 1 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, BH - 1};
    const int64_t slice = heads * N * d;
    // Inputs, every layer's X, five [heads,N,d] gradients and scratch, and P and dS of one head, in
    // double; then the exact and emulated results (double) and the captured outputs (float).
    plan.working_bytes = (p.layers + 8) * slice * 8 + 2 * N * N * 8 + 4 * slice * 8;
    plan.kept_bytes = 4 * slice * 8 + 2 * slice * 4;
    return plan;
  }
  if (p.layers == 1) {
    plan.kind = ReferencePlan::Kind::rows;
    plan.heads = {0};
    for (int64_t sample = 0; sample < 16 && sample < N; ++sample)
      plan.rows.push_back((sample * 7919 + N - 1) % N);  // the last row, then spread out
    std::sort(plan.rows.begin(), plan.rows.end());
    plan.rows.erase(std::unique(plan.rows.begin(), plan.rows.end()), plan.rows.end());
    plan.working_bytes = (N * d + N) * 8;
    plan.kept_bytes = 3 * int64_t(plan.rows.size()) * d * 8;
    return plan;
  }
  plan.not_checked = fmt::format("float64 reference of one head would take {:.2g} FLOP, over the budget of {:.2g}",
                                 reference_stack_flop(p, 1), budget);
  return plan;
}

double relative_error(std::span<const double> x, std::span<const double> ref) {
  const std::vector<float> narrowed(x.begin(), x.end());
  return max_relative_error(narrowed, ref);
}

// Elements of `heads` (or of rows of heads[0]) of a [B·H, N, d] tensor on the device.
std::vector<float> gather(Device& device, const void* tensor, Dtype dtype, const Problem& p, const ReferencePlan& plan) {
  const int64_t N = p.seq, d = p.head_dim;
  std::vector<float> out;
  if (plan.kind == ReferencePlan::Kind::rows) {
    for (int64_t row : plan.rows) {
      const std::vector<float> part = device.download(tensor, dtype, (plan.heads[0] * N + row) * d, d);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  for (int64_t h : plan.heads) {
    const std::vector<float> part = device.download(tensor, dtype, h * N * d, N * d);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// FLASHBENCH_INJECT_FAILURE=NAME makes implementation NAME fail at its first forward as a kernel
// failure would (a RuntimeFailure), so that the command line's handling of one can be tested on
// every device; nothing else reads it.
void inject_failure(const Implementation& implementation) {
  const char* name = std::getenv("FLASHBENCH_INJECT_FAILURE");
  if (name && implementation.name() == name)
    throw RuntimeFailure(fmt::format("injected failure in {} (FLASHBENCH_INJECT_FAILURE)", implementation.name()));
}

uint64_t problem_seed(const RunOptions& options, const Problem& problem) {
  return options.seed ^ std::hash<std::string>{}(problem.describe());
}

}  // namespace

// The exact and the naive results on the plan's part of the problem, and the judgement.
struct Runner::Reference {
  ReferencePlan plan;
  std::vector<double> output, input_grad;              // exact
  std::optional<double> naive_error;                   // the naive computation's error against them
  double max_abs_score = 0;

  // FlashAttention's bar: the error may be a small multiple of that of the same computation done
  // naively in the storage precision, plus what exp(S − LSE) costs in fp32 at the largest logit
  // (its condition number is its argument) and a floor for summation order.
  Check judge(const Problem& p, const std::vector<float>& got_output, const std::vector<float>& got_grad) const {
    Check check;
    check.reference = plan.kind == ReferencePlan::Kind::rows ? "float64 rows (output)" : "float64";
    check.max_rel_err = max_relative_error(got_output, output);
    if (!got_grad.empty()) check.max_rel_err = std::max(check.max_rel_err, max_relative_error(got_grad, input_grad));
    check.naive_rel_err = naive_error;
    const double logit_bound = 8.0 * max_abs_score * std::ldexp(1.0, -24);
    const double floor = p.dtype == Dtype::fp32 ? 1e-5 : 1e-6;
    check.tolerance = 3.0 * naive_error.value_or(0.0) + logit_bound + floor;
    return check;
  }
};

Runner::Runner(Device& device, RunOptions options) : device_(device), options_(std::move(options)) {}

std::vector<Row> Runner::run(const Problem& problem, std::span<Implementation* const> implementations) {
  validate(problem);
  const ModelParams params = device_.model_params(problem);
  const std::optional<int64_t> limit =
      options_.mem_limit_bytes > 0 ? std::optional<int64_t>(options_.mem_limit_bytes) : device_.available_bytes();
  // The harness's own buffers live on the host: within the limit where the device's memory is the
  // host's, within what the host has free otherwise.
  const std::optional<int64_t> host_available = device_.shares_host_memory() ? limit : available_memory_bytes();
  ReferencePlan plan = plan_reference(problem, options_);
  if (plan.kind != ReferencePlan::Kind::none) {
    // The reference reads input set 0 as the device filled it: one set on the device, and its
    // working memory on the host.
    const int64_t host_need = plan.working_bytes + (device_.shares_host_memory() ? input_bytes(problem) : 0);
    std::optional<std::string> why;
    if (host_available && host_need > *host_available)
      why = fmt::format("the float64 reference needs {} of host memory, {} available", format_bytes(host_need),
                        format_bytes(*host_available));
    else if (!device_.shares_host_memory() && limit && input_bytes(problem) > *limit)
      why = fmt::format("the reference's inputs need {}, {} available", format_bytes(input_bytes(problem)),
                        format_bytes(*limit));
    if (why) {
      plan = ReferencePlan{};
      plan.not_checked = *why;
    }
  }
  // What the harness itself holds on the host beside an implementation's buffers.
  const int64_t harness_bytes = plan.kept_bytes + (options_.cold ? device_.cache_flush_bytes() : 0);

  // Pre-flight: every row that will not run is decided before anything is allocated.
  std::vector<Row> rows(implementations.size());
  bool any_runnable = false;
  for (size_t k = 0; k < implementations.size(); ++k) {
    Implementation& implementation = *implementations[k];
    Row& row = rows[k];
    row.backend = std::string(device_.name());
    row.variant = implementation.variant();
    row.impl = std::string(implementation.name());
    row.problem = problem;
    row.cold = options_.cold;
    device_.annotate(row);
    implementation.annotate(row);
    if (auto why = implementation.unsupported(problem)) {
      row.status = Status::skipped;
      row.reason = *why;
      continue;
    }
    row.model = model_memory(problem, implementation.variant(), implementation.costs(problem, params), params);
    const int64_t device_need = row.model->peak_bytes + (device_.shares_host_memory() ? harness_bytes : 0);
    std::optional<std::string> why;
    if (limit) why = does_not_fit(device_need, *limit);
    if (!why && !device_.shares_host_memory() && host_available && harness_bytes > *host_available)
      why = fmt::format("the harness needs {} of host memory, {} available", format_bytes(harness_bytes),
                        format_bytes(*host_available));
    if (why) {
      row.status = Status::skipped;
      row.reason = *why;
      if (harness_bytes > 0 && device_.shares_host_memory())
        row.reason += fmt::format(" (model {} + harness {})", format_bytes(row.model->peak_bytes), format_bytes(harness_bytes));
      continue;
    }
    any_runnable = true;
  }
  if (!any_runnable) return rows;

  const uint64_t seed = problem_seed(options_, problem);
  const int64_t elements = problem.qkv_elements();
  const int64_t ledger_limit = limit.value_or(MemoryLedger::kUnlimited);

  // The float64 reference, once per problem, on input set 0 as the device filled it.
  std::optional<Reference> reference;
  std::string reference_failure;
  if (plan.kind != ReferencePlan::Kind::none) {
    try {
      MemoryLedger ledger(ledger_limit);
      std::unique_ptr<MemorySpace> space = device_.open_space(ledger);
      RawBuffer X0(*space, Tag::input, elements * element_bytes(problem.dtype));
      RawBuffer dO(*space, Tag::input, elements * element_bytes(problem.dtype));
      device_.fill_normal(problem.dtype, X0.data(), elements, seed);
      device_.fill_normal(problem.dtype, dO.data(), elements, seed + 1);
      Reference r;
      r.plan = plan;
      const ReferencePlan heads_only{ReferencePlan::Kind::stack, plan.heads, {}, {}, 0, 0};
      const std::vector<float> x_f = gather(device_, X0.data(), problem.dtype, problem, heads_only);
      const std::vector<double> x(x_f.begin(), x_f.end());
      if (plan.kind == ReferencePlan::Kind::stack) {
        const std::vector<float> g_f = gather(device_, dO.data(), problem.dtype, problem, heads_only);
        const std::vector<double> g(g_f.begin(), g_f.end());
        const ReferenceShape shape{int64_t(plan.heads.size()), problem.seq, problem.head_dim, problem.causal};
        StackReference exact = reference_stack(shape, problem.layers, x, g);
        const StackReference naive = reference_stack(shape, problem.layers, x, g, problem.dtype);
        r.naive_error = std::max(relative_error(naive.output, exact.output),
                                 relative_error(naive.input_grad, exact.input_grad));
        r.max_abs_score = exact.max_abs_score;
        r.output = std::move(exact.output);
        r.input_grad = std::move(exact.input_grad);
      } else {
        r.output = reference_output_rows(problem.seq, problem.head_dim, problem.causal, x, plan.rows, std::nullopt,
                                         &r.max_abs_score);
        const std::vector<double> naive = reference_output_rows(problem.seq, problem.head_dim, problem.causal, x,
                                                                plan.rows, problem.dtype, nullptr);
        r.naive_error = relative_error(naive, r.output);
      }
      reference = std::move(r);
    } catch (const OutOfMemory& e) {
      reference_failure = fmt::format("no memory for the reference's inputs: {}", e.what());
    } catch (const std::bad_alloc&) {
      reference_failure = "the system refused the float64 reference's memory";
    } catch (const RuntimeFailure& e) {
      reference_failure = fmt::format("the reference's inputs could not be made: {}", e.what());
    }
  }

  for (size_t k = 0; k < implementations.size(); ++k) {
    Row& row = rows[k];
    if (row.status != Status::ok) continue;
    if (options_.check && !reference)
      row.not_checked = plan.kind == ReferencePlan::Kind::none ? plan.not_checked : reference_failure;
    Implementation& implementation = *implementations[k];
    MemoryLedger ledger(ledger_limit);
    try {
      std::unique_ptr<MemorySpace> space = device_.open_space(ledger);
      space->reset_os_peak();
      ledger.set_phase(Phase::setup);
      std::vector<RawBuffer> X0, dO;
      for (int64_t set = 0; set < params.input_sets; ++set) {
        X0.emplace_back(*space, Tag::input, elements * element_bytes(problem.dtype));
        dO.emplace_back(*space, Tag::input, elements * element_bytes(problem.dtype));
        device_.fill_normal(problem.dtype, X0.back().data(), elements, seed + 2 * uint64_t(set));
        device_.fill_normal(problem.dtype, dO.back().data(), elements, seed + 2 * uint64_t(set) + 1);
      }
      LayerStack stack(problem, implementation, device_, *space);
      std::unique_ptr<PhaseTimer> timer = device_.timer();
      inject_failure(implementation);

      // The measured pass: memory (the ledger and the outside view) and the outputs for the check.
      device_.synchronize();
      ledger.reset_peaks();
      if (options_.cold) device_.flush_caches();
      ledger.set_phase(Phase::fwd);
      timer->mark();
      stack.forward(X0[0].data());
      timer->mark();
      std::vector<float> output, input_grad;
      if (reference) output = gather(device_, stack.output(), problem.dtype, problem, reference->plan);
      row.measured.kept_bytes = ledger.live()[Tag::kept];
      ledger.set_phase(Phase::bwd);
      timer->mark();
      RawBuffer dX0 = stack.backward(X0[0].data(), dO[0].data());
      timer->mark();
      device_.synchronize();
      if (reference && reference->plan.kind == ReferencePlan::Kind::stack)
        input_grad = gather(device_, dX0.data(), device_.gradient_dtype(problem), problem, reference->plan);
      dX0.reset();
      row.measured.peak_bytes = ledger.peak_bytes();
      row.measured.peak_phase = ledger.peak_phase();
      row.measured.by_tag = ledger.at_peak();
      row.measured.high_water = ledger.high_water();
      row.measured.os_peak_bytes = space->os_peak_bytes();
      const std::vector<double> first = timer->intervals_ms();  // fwd, capture, bwd
      if (reference) row.check = reference->judge(problem, output, input_grad);

      // Warm-up (the measured pass counts as the first run), then samples until the median is
      // steady, rotating input sets so that no sample finds its inputs in a cache.
      const SamplingPolicy& policy = options_.sampling;
      int warmups_done = 1;
      double warmup_ms = first[0] + first[2];
      int64_t next_set = 1;
      std::vector<double> fwd_ms, bwd_ms;
      auto sampling_start = std::chrono::steady_clock::now();
      auto seconds_sampling = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - sampling_start).count();
      };
      while (true) {
        const bool warming_up = needs_more_warmup(policy, warmups_done, warmup_ms);
        if (!warming_up && !needs_more_samples(policy, {&fwd_ms, &bwd_ms}, seconds_sampling())) break;
        const int64_t set = next_set++ % params.input_sets;
        if (options_.cold) device_.flush_caches();
        ledger.set_phase(Phase::fwd);
        timer->mark();
        stack.forward(X0[set].data());
        timer->mark();
        ledger.set_phase(Phase::bwd);
        RawBuffer dX = stack.backward(X0[set].data(), dO[set].data());
        timer->mark();
        const std::vector<double> times = timer->intervals_ms();
        if (warming_up) {
          ++warmups_done;
          warmup_ms += times[0] + times[1];
          if (!needs_more_warmup(policy, warmups_done, warmup_ms)) sampling_start = std::chrono::steady_clock::now();
          continue;
        }
        fwd_ms.push_back(times[0]);
        bwd_ms.push_back(times[1]);
      }
      row.fwd = summarize(std::move(fwd_ms), policy.max_noise);
      row.bwd = summarize(std::move(bwd_ms), policy.max_noise);
      if (row.check && !row.check->passed()) {
        row.status = Status::failed;
        row.reason = fmt::format("outputs differ from {} by {:.2e} (tolerance {:.2e})", row.check->reference,
                                 row.check->max_rel_err, row.check->tolerance);
      }
    } catch (const OutOfMemory& e) {
      row.status = Status::oom;
      row.reason = e.what();
    } catch (const std::bad_alloc&) {
      row.status = Status::oom;
      row.reason = "the system refused an allocation";
    } catch (const RuntimeFailure& e) {
      row.status = Status::failed;
      row.reason = e.what();
    }
  }
  return rows;
}

Runner::Pass Runner::run_once(const Problem& problem, Implementation& implementation, std::span<const float> X0,
                              std::span<const float> dO) {
  validate(problem);
  const int64_t elements = problem.qkv_elements();
  if (int64_t(X0.size()) != elements || int64_t(dO.size()) != elements)
    throw UsageError(fmt::format("inputs hold {} and {} values, the problem needs {}", X0.size(), dO.size(), elements));
  if (auto why = implementation.unsupported(problem)) throw UsageError(*why);
  MemoryLedger ledger;
  std::unique_ptr<MemorySpace> space = device_.open_space(ledger);
  RawBuffer X0_device(*space, Tag::input, elements * element_bytes(problem.dtype));
  RawBuffer dO_device(*space, Tag::input, elements * element_bytes(problem.dtype));
  device_.upload(X0, problem.dtype, X0_device.data());
  device_.upload(dO, problem.dtype, dO_device.data());
  LayerStack stack(problem, implementation, device_, *space);
  stack.forward(X0_device.data());
  Pass pass;
  pass.output = device_.download(stack.output(), problem.dtype, 0, elements);
  RawBuffer dX0 = stack.backward(X0_device.data(), dO_device.data());
  device_.synchronize();
  pass.input_grad = device_.download(dX0.data(), device_.gradient_dtype(problem), 0, elements);
  return pass;
}

}  // namespace flashbench
