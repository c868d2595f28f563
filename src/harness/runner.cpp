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
#include "flashbench/timeline.hpp"
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

// Throws RuntimeFailure naming `what` and the [b, h, n, k] of its first NaN or Inf: a non-finite
// output or gradient is a failure to report where it is, not an error to fold into a check.
// Reads the tensor in chunks, so the host holds at most 16 MiB of it at a time.
void require_finite(Device& device, const void* tensor, Dtype dtype, const Problem& p, std::string_view what) {
  constexpr int64_t kChunk = int64_t{1} << 22;  // [elements]
  const int64_t total = p.qkv_elements();
  for (int64_t start = 0; start < total; start += kChunk) {
    const std::vector<float> part = device.download(tensor, dtype, start, std::min(kChunk, total - start));
    for (size_t i = 0; i < part.size(); ++i) {
      if (std::isfinite(part[i])) continue;
      int64_t e = start + int64_t(i);
      const int64_t k = e % p.head_dim;
      e /= p.head_dim;
      const int64_t n = e % p.seq;
      e /= p.seq;
      throw RuntimeFailure(fmt::format("{} holds {} at [b={}, h={}, n={}, k={}]", what, part[i], e / p.heads,
                                       e % p.heads, n, k));
    }
  }
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

// The exact and the naive results on the plan's part of the problem, and the judgement.
struct Reference {
  ReferencePlan plan;
  std::vector<double> output, input_grad;  // exact
  std::optional<double> naive_error;       // the naive computation's error against them
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

// What a run decides about a problem before anything is allocated.
struct Setting {
  ModelParams params;
  std::optional<int64_t> limit;           // the device's memory a run may use [bytes]
  std::optional<int64_t> host_available;  // the host's, for the harness's own buffers [bytes]
  ReferencePlan reference;
  uint64_t seed = 0;                      // of input set 0; set k uses seed + 2k (X0), + 2k + 1 (dO)
  int64_t host_bytes = 0;                 // what the harness holds on the host beside a run [bytes]
  int64_t device_bytes = 0;               // ... and on the device, outside the ledger [bytes]
};

Setting settle(Device& device, const RunOptions& options, const Problem& problem) {
  Setting s;
  s.params = device.model_params(problem);
  s.limit = options.mem_limit_bytes > 0 ? std::optional<int64_t>(options.mem_limit_bytes) : device.available_bytes();
  // The harness's own buffers live on the host: within the limit where the device's memory is the
  // host's, within what the host has free otherwise.
  s.host_available = device.shares_host_memory() ? s.limit : available_memory_bytes();
  s.seed = problem_seed(options, problem);
  s.reference = plan_reference(problem, options);
  if (s.reference.kind != ReferencePlan::Kind::none) {
    // The reference reads input set 0 as the device filled it: one set on the device, and its
    // working memory on the host.
    const int64_t host_need = s.reference.working_bytes + (device.shares_host_memory() ? input_bytes(problem) : 0);
    std::optional<std::string> why;
    if (s.host_available && host_need > *s.host_available)
      why = fmt::format("the float64 reference needs {} of host memory, {} available", format_bytes(host_need),
                        format_bytes(*s.host_available));
    else if (!device.shares_host_memory() && s.limit && input_bytes(problem) > *s.limit)
      why = fmt::format("the reference's inputs need {}, {} available", format_bytes(input_bytes(problem)),
                        format_bytes(*s.limit));
    if (why) {
      s.reference = ReferencePlan{};
      s.reference.not_checked = *why;
    }
  }
  s.host_bytes = s.reference.kept_bytes;
  s.device_bytes = options.cold ? device.cache_flush_bytes() : 0;
  return s;
}

// A row for each implementation, and `skipped` for those that cannot or must not run: unsupported,
// or a modelled peak (with the harness's own buffers beside it) over what is available.
std::vector<Row> preflight(Device& device, const RunOptions& options, const Problem& problem,
                           std::span<Implementation* const> implementations, const Setting& s) {
  std::vector<Row> rows(implementations.size());
  for (size_t k = 0; k < implementations.size(); ++k) {
    const Implementation& implementation = *implementations[k];
    Row& row = rows[k];
    row.backend = std::string(device.name());
    row.variant = implementation.variant();
    row.impl = std::string(implementation.name());
    row.problem = problem;
    row.cold = options.cold;
    device.annotate(row);
    implementation.annotate(row);
    if (auto why = implementation.unsupported(problem)) {
      row.status = Status::skipped;
      row.reason = *why;
      continue;
    }
    row.model = model_memory(problem, implementation.variant(), implementation.costs(problem, s.params), s.params);
    const int64_t beside = s.device_bytes + (device.shares_host_memory() ? s.host_bytes : 0);
    std::optional<std::string> why;
    if (s.limit) why = does_not_fit(row.model->peak_bytes + beside, *s.limit);
    if (why && beside > 0)
      *why += fmt::format(" (model {} + harness {})", format_bytes(row.model->peak_bytes), format_bytes(beside));
    if (!why && !device.shares_host_memory() && s.host_available && s.host_bytes > *s.host_available)
      why = fmt::format("the harness needs {} of host memory, {} available", format_bytes(s.host_bytes),
                        format_bytes(*s.host_available));
    if (why) {
      row.status = Status::skipped;
      row.reason = *why;
    }
  }
  return rows;
}

// The float64 reference on input set 0 as the device filled it, or why there is none.
std::optional<Reference> make_reference(Device& device, const Problem& problem, const Setting& s,
                                        std::string& why_not) {
  const ReferencePlan& plan = s.reference;
  if (plan.kind == ReferencePlan::Kind::none) {
    why_not = plan.not_checked;
    return std::nullopt;
  }
  const int64_t elements = problem.qkv_elements();
  try {
    MemoryLedger ledger(s.limit.value_or(MemoryLedger::kUnlimited));
    std::unique_ptr<MemorySpace> space = device.open_space(ledger);
    RawBuffer X0(*space, Tag::input, elements * element_bytes(problem.dtype));
    RawBuffer dO(*space, Tag::input, elements * element_bytes(problem.dtype));
    device.fill_normal(problem.dtype, X0.data(), elements, s.seed);
    device.fill_normal(problem.dtype, dO.data(), elements, s.seed + 1);
    Reference r;
    r.plan = plan;
    const ReferencePlan whole_heads{ReferencePlan::Kind::stack, plan.heads, {}, {}, 0, 0};
    const std::vector<float> x_stored = gather(device, X0.data(), problem.dtype, problem, whole_heads);
    const std::vector<double> x(x_stored.begin(), x_stored.end());
    if (plan.kind == ReferencePlan::Kind::stack) {
      const std::vector<float> g_stored = gather(device, dO.data(), problem.dtype, problem, whole_heads);
      const std::vector<double> g(g_stored.begin(), g_stored.end());
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
    return r;
  } catch (const OutOfMemory& e) {
    why_not = fmt::format("no memory for the reference's inputs: {}", e.what());
  } catch (const std::bad_alloc&) {
    why_not = "the system refused the float64 reference's memory";
  } catch (const RuntimeFailure& e) {
    why_not = fmt::format("the reference's inputs could not be made: {}", e.what());
  }
  return std::nullopt;
}

// One implementation, in a fresh memory space behind a fresh ledger: the measured pass (memory,
// outputs for the check), warm-up and samples under the one stopping rule. Throws what the device
// or the implementation throws; the caller turns it into the row's status.
void measure(Device& device, const RunOptions& options, const Problem& problem, Implementation& implementation,
             const Setting& s, const std::optional<Reference>& reference, Row& row) {
  const int64_t elements = problem.qkv_elements();
  MemoryLedger ledger(s.limit.value_or(MemoryLedger::kUnlimited));
  std::unique_ptr<MemorySpace> space = device.open_space(ledger);
  space->reset_os_peak();
  ledger.set_phase(Phase::setup);
  std::vector<RawBuffer> X0, dO;
  for (int64_t set = 0; set < s.params.input_sets; ++set) {
    X0.emplace_back(*space, Tag::input, elements * element_bytes(problem.dtype));
    dO.emplace_back(*space, Tag::input, elements * element_bytes(problem.dtype));
    device.fill_normal(problem.dtype, X0.back().data(), elements, s.seed + 2 * uint64_t(set));
    device.fill_normal(problem.dtype, dO.back().data(), elements, s.seed + 2 * uint64_t(set) + 1);
  }
  LayerStack stack(problem, implementation, device, *space);
  std::unique_ptr<PhaseTimer> timer = device.timer();
  inject_failure(implementation);

  // The measured pass: memory (the ledger and the outside view) and the outputs for the check.
  device.synchronize();
  ledger.reset_peaks();
  if (options.cold) device.flush_caches();
  // The timeline starts where the peak does, from the same live bytes, so that its replay reaches
  // exactly the measured peak.
  std::shared_ptr<MemoryTimeline> timeline;
  if (options.record_timeline) {
    timeline = std::make_shared<MemoryTimeline>(ledger.live());
    ledger.attach(timeline.get());
  }
  // Detached before the timeline goes, however this pass ends: the stack's buffers outlive it.
  struct Detach {
    MemoryLedger& ledger;
    ~Detach() { ledger.attach(nullptr); }
  } const detach{ledger};
  ledger.set_phase(Phase::fwd);
  timer->mark();
  {
    const ScopedSpan span(timeline.get(), "forward");
    stack.forward(X0[0].data());
  }
  timer->mark();
  require_finite(device, stack.output(), problem.dtype, problem, "the output X_L");
  std::vector<float> output, input_grad;
  if (reference) output = gather(device, stack.output(), problem.dtype, problem, reference->plan);
  row.measured.kept_bytes = ledger.live()[Tag::kept];
  ledger.set_phase(Phase::bwd);
  timer->mark();
  RawBuffer dX0;
  {
    const ScopedSpan span(timeline.get(), "backward");
    dX0 = stack.backward(X0[0].data(), dO[0].data());
  }
  timer->mark();
  device.synchronize();
  require_finite(device, dX0.data(), device.gradient_dtype(problem), problem, "the input gradient dX_0");
  if (reference && reference->plan.kind == ReferencePlan::Kind::stack)
    input_grad = gather(device, dX0.data(), device.gradient_dtype(problem), problem, reference->plan);
  dX0.reset();
  row.measured.peak_bytes = ledger.peak_bytes();
  row.measured.peak_phase = ledger.peak_phase();
  row.measured.by_tag = ledger.at_peak();
  row.measured.high_water = ledger.high_water();
  row.measured.os_peak_bytes = space->os_peak_bytes();
  ledger.attach(nullptr);  // the samples below run untraced
  row.timeline = std::move(timeline);
  const std::vector<double> first = timer->intervals_ms();  // fwd, the capture, bwd
  if (reference) row.check = reference->judge(problem, output, input_grad);

  // Warm-up (the measured pass counts as the first run), then samples until the median is steady,
  // rotating input sets so that no sample finds its inputs in a cache.
  const SamplingPolicy& policy = options.sampling;
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
    const int64_t set = next_set++ % s.params.input_sets;
    if (options.cold) device.flush_caches();
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
}

}  // namespace

Runner::Runner(Device& device, RunOptions options) : device_(device), options_(std::move(options)) {}

std::vector<Row> Runner::run(const Problem& problem, std::span<Implementation* const> implementations) {
  validate(problem);
  const Setting setting = settle(device_, options_, problem);
  std::vector<Row> rows = preflight(device_, options_, problem, implementations, setting);
  if (std::none_of(rows.begin(), rows.end(), [](const Row& row) { return row.status == Status::ok; })) return rows;

  std::string why_not_checked;
  const std::optional<Reference> reference = make_reference(device_, problem, setting, why_not_checked);
  for (size_t k = 0; k < implementations.size(); ++k) {
    Row& row = rows[k];
    if (row.status != Status::ok) continue;
    if (options_.check && !reference) row.not_checked = why_not_checked;
    try {
      measure(device_, options_, problem, *implementations[k], setting, reference, row);
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
