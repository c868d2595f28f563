#include "flashbench/harness/runner.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <new>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

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
// query heads never mix), sampled rows of the output when one layer's whole head is over the budget,
// or nothing, with the reason. Where the stack attends to a context, the heads are those of the first
// K/V group and the last head, so that dC of K/V head 0 — a sum over its whole group — is checked.
struct ReferencePlan {
  enum class Kind { none, stack, rows } kind = Kind::none;
  std::vector<int64_t> heads;  // flattened B·H indices
  std::vector<int64_t> rows;   // Kind::rows: rows of heads[0]
  std::vector<int64_t> context_heads;   // flattened B·G indices of C that `heads` read, in order
  std::vector<int64_t> context_of;      // heads[k] reads context_heads[context_of[k]]
  std::vector<int64_t> checked_context; // indices into context_heads whose dC the reference has whole
  std::string not_checked;     // Kind::none: why
  int64_t working_bytes = 0;   // host memory while it is computed [bytes]
  int64_t kept_bytes = 0;      // host memory it and the captured outputs hold afterwards [bytes]
};

// The plan's context heads for its query heads, and which of them have their whole group.
void plan_context(const Problem& p, ReferencePlan& plan) {
  if (p.self_attention()) return;
  const int64_t r = p.group_size();
  for (int64_t h : plan.heads) {
    const int64_t g = h / r;
    if (plan.context_heads.empty() || plan.context_heads.back() != g) plan.context_heads.push_back(g);
    plan.context_of.push_back(int64_t(plan.context_heads.size()) - 1);
  }
  if (plan.kind != ReferencePlan::Kind::stack) return;
  for (size_t k = 0; k < plan.context_heads.size(); ++k) {
    const int64_t g = plan.context_heads[k];
    const auto covered = std::count_if(plan.heads.begin(), plan.heads.end(), [&](int64_t h) { return h / r == g; });
    if (covered == r) plan.checked_context.push_back(int64_t(k));
  }
}

ReferencePlan plan_reference(const Problem& p, const RunOptions& options) {
  ReferencePlan plan;
  if (!options.check) return plan;
  const int64_t BH = p.heads_total(), N = p.seq, Nk = p.key_seq(), d = p.head_dim;
  const double budget = options.reference_flop_budget;
  // The first and the last head: an indexing error past head 0 shows in the last. With a context,
  // first the whole first group with the last head.
  std::vector<std::vector<int64_t>> choices;
  if (!p.self_attention() && p.group_size() > 1) {
    std::vector<int64_t> group;
    for (int64_t h = 0; h < p.group_size(); ++h) group.push_back(h);
    if (group.back() != BH - 1) group.push_back(BH - 1);
    choices.push_back(group);
  }
  choices.push_back(BH >= 2 ? std::vector<int64_t>{0, BH - 1} : std::vector<int64_t>{0});
  choices.push_back({0});
  for (const std::vector<int64_t>& heads : choices) {
    if (reference_stack_flop(p, int64_t(heads.size())) > budget) continue;
    plan.kind = ReferencePlan::Kind::stack;
    plan.heads = heads;
    plan_context(p, plan);
    const int64_t slice = int64_t(heads.size()) * N * d;
    const int64_t context = int64_t(plan.context_heads.size()) * Nk * d;
    // Inputs, every layer's X, five [heads,N,d] gradients and scratch, and P and dS of one head, in
    // double, the context and its gradient; then the exact and emulated results (double) and the
    // captured outputs (float).
    plan.working_bytes = (p.layers + 8) * slice * 8 + 2 * N * Nk * 8 + 4 * slice * 8 + 6 * context * 8;
    plan.kept_bytes = 4 * slice * 8 + 2 * slice * 4 + 2 * context * (8 + 4);
    return plan;
  }
  if (p.layers == 1) {
    plan.kind = ReferencePlan::Kind::rows;
    plan.heads = {0};
    plan_context(p, plan);
    for (int64_t sample = 0; sample < 16 && sample < N; ++sample)
      plan.rows.push_back((sample * 7919 + N - 1) % N);  // the last row, then spread out
    std::sort(plan.rows.begin(), plan.rows.end());
    plan.rows.erase(std::unique(plan.rows.begin(), plan.rows.end()), plan.rows.end());
    plan.working_bytes = (N * d + Nk * d + Nk) * 8;
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

// Heads `heads` of a tensor of [*, per_head] elements on the device, one after the other.
std::vector<float> gather_heads(Device& device, const void* tensor, Dtype dtype, std::span<const int64_t> heads,
                                int64_t per_head) {
  std::vector<float> out;
  for (int64_t h : heads) {
    const std::vector<float> part = device.download(tensor, dtype, h * per_head, per_head);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Elements of `heads` (or of rows of heads[0]) of a [B·H, N, d] tensor on the device.
std::vector<float> gather(Device& device, const void* tensor, Dtype dtype, const Problem& p, const ReferencePlan& plan) {
  const int64_t N = p.seq, d = p.head_dim;
  if (plan.kind != ReferencePlan::Kind::rows) return gather_heads(device, tensor, dtype, plan.heads, N * d);
  std::vector<float> out;
  for (int64_t row : plan.rows) {
    const std::vector<float> part = device.download(tensor, dtype, (plan.heads[0] * N + row) * d, d);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// The context heads of the plan whose dC the reference has whole, from a [B·G, N_k, d] tensor.
std::vector<float> gather_checked_context(Device& device, const void* tensor, Dtype dtype, const Problem& p,
                                          const ReferencePlan& plan) {
  std::vector<int64_t> heads;
  for (int64_t k : plan.checked_context) heads.push_back(plan.context_heads[k]);
  return gather_heads(device, tensor, dtype, heads, p.key_seq() * p.head_dim);
}

// 64-bit FNV-1a over the bits of float values, one 32-bit word at a time: a fingerprint of a
// tensor, equal for equal bits.
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
uint64_t fnv1a(uint64_t hash, std::span<const float> values) {
  for (float value : values) {
    hash ^= std::bit_cast<uint32_t>(value);
    hash *= 0x100000001b3ull;
  }
  return hash;
}
std::string hex(uint64_t hash) { return fmt::format("{:016x}", hash); }

// A [B, heads, rows, d] tensor on the device: X, O, dO and dX have H heads and N rows, the context C
// and its gradient dC have G heads and N_k rows.
struct TensorShape {
  int64_t heads = 0, rows = 0;
  static TensorShape queries(const Problem& p) { return {p.heads, p.seq}; }
  static TensorShape context(const Problem& p) { return {p.key_heads(), p.key_seq()}; }
};

// The elements of a [B, heads, rows, d] tensor on the device, 16 MiB of them at a time on the host.
constexpr int64_t kScanChunk = int64_t{1} << 22;  // [elements]
template <class Visit>
void scan(Device& device, const void* tensor, Dtype dtype, const Problem& p, TensorShape shape, Visit visit) {
  const int64_t total = p.batch * shape.heads * shape.rows * p.head_dim;
  for (int64_t start = 0; start < total; start += kScanChunk)
    visit(start, device.download(tensor, dtype, start, std::min(kScanChunk, total - start)));
}

// Folds the tensor into `hash`; throws RuntimeFailure naming `what` and the [b, h, n, k] of its
// first NaN or Inf: a non-finite output or gradient is a failure to report where it is, not an
// error to fold into a check.
uint64_t hash_finite(Device& device, const void* tensor, Dtype dtype, const Problem& p, TensorShape shape,
                     std::string_view what, uint64_t hash) {
  scan(device, tensor, dtype, p, shape, [&](int64_t start, const std::vector<float>& part) {
    for (size_t i = 0; i < part.size(); ++i) {
      if (std::isfinite(part[i])) continue;
      int64_t e = start + int64_t(i);
      const int64_t k = e % p.head_dim;
      e /= p.head_dim;
      const int64_t n = e % shape.rows;
      e /= shape.rows;
      throw RuntimeFailure(fmt::format("{} holds {} at [b={}, h={}, n={}, k={}]", what, part[i], e / shape.heads,
                                       e % shape.heads, n, k));
    }
    hash = fnv1a(hash, part);
  });
  return hash;
}

// The largest row norm max_i |x_i| of a [B, heads, rows, d] tensor on the device.
double max_row_norm(Device& device, const void* tensor, Dtype dtype, const Problem& p, TensorShape shape) {
  double max_square = 0, square = 0;  // square: of the row in hand, which may span two chunks
  scan(device, tensor, dtype, p, shape, [&](int64_t start, const std::vector<float>& part) {
    for (size_t i = 0; i < part.size(); ++i) {
      square += double(part[i]) * double(part[i]);
      if ((start + int64_t(i) + 1) % p.head_dim == 0) {
        max_square = std::max(max_square, square);
        square = 0;
      }
    }
  });
  return std::sqrt(max_square);
}

// How large the logits |S_ij| = scale·|q_i·k_j| of the stack get, and whether that size is met.
struct LogitSize {
  double value = 0;
  bool attained = false;  // some S_ij equals it; otherwise it is an upper bound
};

// Self-attention: scale·max_i |x_i|² over the rows of X_0, met by layer 0's diagonal (Q = K = X,
// never masked); a layer's output rows are convex combinations of its input rows, so without dropout
// no later layer goes past it (dropout's 1/(1 − p) can; the size is then met, a lower bound).
// Attention to a context C: Cauchy-Schwarz bounds layer 0 by scale·max|x|·max|c| and, as every later
// layer's rows are combinations of C's rows (with weights summing to at most 1/(1 − p)), the later
// ones by scale·max|c|²/(1 − p): an upper bound, not met in general.
LogitSize logit_size(Device& device, const Problem& p, const void* X0, const void* C) {
  const double x = max_row_norm(device, X0, p.dtype, p, TensorShape::queries(p));
  if (p.self_attention()) return {double(p.scale()) * x * x, true};
  const double c = max_row_norm(device, C, p.dtype, p, TensorShape::context(p));
  return {double(p.scale()) * c * std::max(x, c / (1.0 - p.dropout)), false};
}

// The hazards of a problem's inputs, named for the row: logits beyond what a 16-bit tensor holds,
// where a kernel that stores S in the storage dtype (v1 keeps S) would hold inf.
std::vector<std::string> input_hazards(const Problem& p, LogitSize logits) {
  std::vector<std::string> hazards;
  constexpr double kFp16Max = 65504;
  if (p.dtype == Dtype::fp16 && logits.value > kFp16Max)
    hazards.push_back(fmt::format("fp16 overflow: the logits {} |S| = {:.3g}, beyond fp16's largest {:.0f}; "
                                  "S stored in fp16 is inf there",
                                  logits.attained ? "reach" : "may reach", logits.value, kFp16Max));
  return hazards;
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

// The seed of input set k's context, apart from the X0 and dO seeds of every set.
uint64_t context_seed(uint64_t seed, int64_t set) { return seed + (uint64_t{1} << 32) + uint64_t(set); }

// Multiplies `elements` values of a tensor on the device by `scale`, a chunk at a time on the host.
void scale_on_device(Device& device, Dtype dtype, void* tensor, int64_t elements, double scale) {
  for (int64_t start = 0; start < elements; start += kScanChunk) {
    std::vector<float> part = device.download(tensor, dtype, start, std::min(kScanChunk, elements - start));
    for (float& value : part) value = float(value * scale);
    device.upload(part, dtype, static_cast<char*>(tensor) + start * element_bytes(dtype));
  }
}

// One input set on the device: X0, dO and (where the stack attends to one) the context C, tag input.
// X0 and C are standard normal times `scale` (--input-scale: the logits grow as its square), dO
// standard normal.
struct InputSet {
  RawBuffer X0, dO, C;
  InputSet(Device& device, MemorySpace& space, const Problem& p, uint64_t seed, int64_t set, double scale) {
    const int64_t bytes = p.q_elements() * element_bytes(p.dtype);
    X0 = RawBuffer(space, Tag::input, bytes);
    dO = RawBuffer(space, Tag::input, bytes);
    device.fill_normal(p.dtype, X0.data(), p.q_elements(), seed + 2 * uint64_t(set));
    device.fill_normal(p.dtype, dO.data(), p.q_elements(), seed + 2 * uint64_t(set) + 1);
    if (scale != 1) scale_on_device(device, p.dtype, X0.data(), p.q_elements(), scale);
    if (p.self_attention()) return;
    C = RawBuffer(space, Tag::input, p.kv_elements() * element_bytes(p.dtype));
    device.fill_normal(p.dtype, C.data(), p.kv_elements(), context_seed(seed, set));
    if (scale != 1) scale_on_device(device, p.dtype, C.data(), p.kv_elements(), scale);
  }
  const void* context() const { return C.empty() ? nullptr : C.data(); }
};

// A failed check's one line: the tensors over the tolerance by name ("input_grad differs from
// float64 by …"), or "outputs" where the check did not keep them apart.
std::string failed_check_reason(const Check& check) {
  std::vector<std::string> over;
  for (const CheckedTensor& tensor : check.tensors)
    if (!(tensor.rel_err <= check.tolerance)) over.push_back(tensor.name);  // NaN is over
  if (over.size() == 1)
    return fmt::format("{} differs from {} by {:.2e} (tolerance {:.2e})", over[0], check.reference, check.max_rel_err,
                       check.tolerance);
  const std::string what = over.empty() ? "outputs" : fmt::format("{}", fmt::join(over, " and "));
  return fmt::format("{} differ from {} by up to {:.2e} (tolerance {:.2e})", what, check.reference, check.max_rel_err,
                     check.tolerance);
}

// The exact and the naive results on the plan's part of the problem, and the judgement.
struct Reference {
  ReferencePlan plan;
  std::vector<double> output, input_grad, context_grad;  // exact; dC of plan.checked_context
  // The naive computation's error against each of them (empty where the plan compares fewer).
  std::optional<double> naive_output_error, naive_input_grad_error, naive_context_grad_error;
  double max_abs_score = 0;

  // FlashAttention's bar: the error may be a small multiple of that of the same computation done
  // naively in the storage precision, plus what exp(S − LSE) costs in fp32 at the largest logit
  // (its condition number is its argument) and a floor for summation order.
  Check judge(const Problem& p, const std::vector<float>& got_output, const std::vector<float>& got_grad,
              const std::vector<float>& got_context_grad) const {
    Check check;
    check.reference = plan.kind == ReferencePlan::Kind::rows ? "float64 rows (output)" : "float64";
    auto compare = [&](const char* name, const std::vector<float>& got, const std::vector<double>& exact,
                       std::optional<double> naive) {
      const double error = max_relative_error(got, exact);
      check.tensors.push_back({name, error, naive});
      check.max_rel_err = std::max(check.max_rel_err, error);
    };
    compare("output", got_output, output, naive_output_error);
    if (!got_grad.empty()) compare("input_grad", got_grad, input_grad, naive_input_grad_error);
    if (!got_context_grad.empty()) compare("context_grad", got_context_grad, context_grad, naive_context_grad_error);
    // The bar is made of the largest naive error.
    for (const std::optional<double>& error : {naive_output_error, naive_input_grad_error, naive_context_grad_error})
      if (error) check.naive_rel_err = std::max(check.naive_rel_err.value_or(*error), *error);
    const double logit_bound = 8.0 * max_abs_score * std::ldexp(1.0, -24);
    const double floor = p.dtype == Dtype::fp32 ? 1e-5 : 1e-6;
    // A naive computation that overflowed (fp16 logits beyond its range, a hazard the row names)
    // sets no bar: its infinite error would make a tolerance that passes anything.
    const double naive =
        check.naive_rel_err && std::isfinite(*check.naive_rel_err) ? *check.naive_rel_err : 0.0;
    check.tolerance = 3.0 * naive + logit_bound + floor;
    return check;
  }
};

// What a run decides about a problem before anything is allocated.
struct Setting {
  ModelParams params;
  std::optional<int64_t> limit;           // the device's memory a run may use [bytes]
  std::optional<int64_t> host_available;  // the host's, for the harness's own buffers [bytes]
  ReferencePlan reference;
  uint64_t seed = 0;                      // of input set 0; set k uses seed + 2k (X0), + 2k + 1 (dO),
                                          // context_seed(seed, k) (C)
  double input_scale = 1;                 // X0 and C are standard normal times this
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
  s.input_scale = options.input_scale;
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
  try {
    MemoryLedger ledger(s.limit.value_or(MemoryLedger::kUnlimited));
    std::unique_ptr<MemorySpace> space = device.open_space(ledger);
    const InputSet inputs(device, *space, problem, s.seed, 0, s.input_scale);
    Reference r;
    r.plan = plan;
    const ReferencePlan whole_heads{ReferencePlan::Kind::stack, plan.heads, {}, {}, {}, {}, {}, 0, 0};
    const std::vector<float> x_stored = gather(device, inputs.X0.data(), problem.dtype, problem, whole_heads);
    const std::vector<double> x(x_stored.begin(), x_stored.end());
    std::vector<double> c;
    if (!problem.self_attention()) {
      const std::vector<float> c_stored = gather_heads(device, inputs.C.data(), problem.dtype, plan.context_heads,
                                                       problem.key_seq() * problem.head_dim);
      c.assign(c_stored.begin(), c_stored.end());
    }
    ReferenceShape shape{int64_t(plan.heads.size()), problem.seq, problem.head_dim, problem.causal,
                         problem.key_seq()};
    shape.dropout = problem.dropout;  // the stack's masks: keyed by the problem's seed, layer by layer
    shape.dropout_seed = s.seed;
    shape.head_index = plan.heads;
    if (plan.kind == ReferencePlan::Kind::stack) {
      const std::vector<float> g_stored = gather(device, inputs.dO.data(), problem.dtype, problem, whole_heads);
      const std::vector<double> g(g_stored.begin(), g_stored.end());
      if (problem.self_attention()) {
        StackReference exact = reference_stack(shape, problem.layers, x, g);
        const StackReference naive = reference_stack(shape, problem.layers, x, g, problem.dtype);
        r.naive_output_error = relative_error(naive.output, exact.output);
        r.naive_input_grad_error = relative_error(naive.input_grad, exact.input_grad);
        r.max_abs_score = exact.max_abs_score;
        r.output = std::move(exact.output);
        r.input_grad = std::move(exact.input_grad);
      } else {
        CrossStackReference exact = reference_cross_stack(shape, problem.layers, x, g, c, plan.context_of);
        const CrossStackReference naive =
            reference_cross_stack(shape, problem.layers, x, g, c, plan.context_of, problem.dtype);
        const int64_t per_head = problem.key_seq() * problem.head_dim;
        std::vector<double> exact_context, naive_context;
        for (int64_t k : plan.checked_context) {
          exact_context.insert(exact_context.end(), exact.context_grad.begin() + k * per_head,
                               exact.context_grad.begin() + (k + 1) * per_head);
          naive_context.insert(naive_context.end(), naive.context_grad.begin() + k * per_head,
                               naive.context_grad.begin() + (k + 1) * per_head);
        }
        r.naive_output_error = relative_error(naive.output, exact.output);
        r.naive_input_grad_error = relative_error(naive.input_grad, exact.input_grad);
        r.naive_context_grad_error = relative_error(naive_context, exact_context);
        r.max_abs_score = exact.max_abs_score;
        r.output = std::move(exact.output);
        r.input_grad = std::move(exact.input_grad);
        r.context_grad = std::move(exact_context);
      }
    } else {
      const std::span<const double> kv = problem.self_attention() ? std::span<const double>(x) : std::span<const double>(c);
      r.output = reference_output_rows(shape, x, kv, plan.rows, std::nullopt, &r.max_abs_score);
      const std::vector<double> naive = reference_output_rows(shape, x, kv, plan.rows, problem.dtype, nullptr);
      r.naive_output_error = relative_error(naive, r.output);
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

// Folds dX_0, then dC where the stack has a context, into `hash`; throws as hash_finite does.
uint64_t hash_gradients(Device& device, const Problem& problem, const LayerStack::Gradients& gradients, uint64_t hash) {
  const Dtype dtype = device.gradient_dtype(problem);
  hash = hash_finite(device, gradients.input.data(), dtype, problem, TensorShape::queries(problem),
                     "the input gradient dX_0", hash);
  if (!gradients.context.empty())
    hash = hash_finite(device, gradients.context.data(), dtype, problem, TensorShape::context(problem),
                       "the context gradient dC", hash);
  return hash;
}

// One implementation, in a fresh memory space behind a fresh ledger: the measured pass (memory,
// outputs for the check), warm-up and samples under the one stopping rule. Throws what the device
// or the implementation throws; the caller turns it into the row's status.
void measure(Device& device, const RunOptions& options, const Problem& problem, Implementation& implementation,
             const Setting& s, const std::optional<Reference>& reference, Row& row) {
  MemoryLedger ledger(s.limit.value_or(MemoryLedger::kUnlimited));
  std::unique_ptr<MemorySpace> space = device.open_space(ledger);
  space->reset_os_peak();
  ledger.set_phase(Phase::setup);
  std::vector<InputSet> inputs;
  for (int64_t set = 0; set < s.params.input_sets; ++set)
    inputs.emplace_back(device, *space, problem, s.seed, set, s.input_scale);
  Reproducibility& reproducibility = row.reproducibility.emplace();
  reproducibility.seed = options.seed;
  reproducibility.input_scale = s.input_scale;
  const TensorShape queries = TensorShape::queries(problem), context = TensorShape::context(problem);
  uint64_t inputs_hash = hash_finite(device, inputs[0].X0.data(), problem.dtype, problem, queries, "the input X_0", kFnvOffset);
  inputs_hash = hash_finite(device, inputs[0].dO.data(), problem.dtype, problem, queries, "the input dO", inputs_hash);
  if (inputs[0].context())
    inputs_hash = hash_finite(device, inputs[0].context(), problem.dtype, problem, context, "the context C", inputs_hash);
  reproducibility.inputs_hash = hex(inputs_hash);
  row.hazards = input_hazards(problem, logit_size(device, problem, inputs[0].X0.data(), inputs[0].context()));
  LayerStack stack(problem, implementation, device, *space, s.seed);
  // The passes' device ranges, "<impl> <pass>" (--profile), or none.
  const auto pass_range = [&](std::string_view pass) {
    return options.name_ranges ? fmt::format("{} {}", implementation.name(), pass) : std::string();
  };
  if (options.name_ranges) stack.name_ranges(std::string(implementation.name()));
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
  std::optional<DeviceRange> measured_range;
  measured_range.emplace(device, pass_range("measured"));
  ledger.set_phase(Phase::fwd);
  timer->mark();
  {
    const ScopedSpan span(timeline.get(), "forward");
    stack.forward(inputs[0].X0.data(), inputs[0].context());
  }
  timer->mark();
  const uint64_t output_hash =
      hash_finite(device, stack.output(), problem.dtype, problem, queries, "the output X_L", kFnvOffset);
  std::vector<float> output, input_grad, context_grad;
  if (reference) output = gather(device, stack.output(), problem.dtype, problem, reference->plan);
  row.measured.kept_bytes = ledger.live()[Tag::kept];
  ledger.set_phase(Phase::bwd);
  timer->mark();
  LayerStack::Gradients gradients;
  {
    const ScopedSpan span(timeline.get(), "backward");
    gradients = stack.backward(inputs[0].X0.data(), inputs[0].dO.data(), inputs[0].context());
  }
  timer->mark();
  device.synchronize();
  measured_range.reset();
  const Dtype gradient_dtype = device.gradient_dtype(problem);
  const uint64_t results_hash = hash_gradients(device, problem, gradients, output_hash);
  reproducibility.results_hash = hex(results_hash);
  if (reference && reference->plan.kind == ReferencePlan::Kind::stack) {
    input_grad = gather(device, gradients.input.data(), gradient_dtype, problem, reference->plan);
    if (!gradients.context.empty())
      context_grad = gather_checked_context(device, gradients.context.data(), gradient_dtype, problem, reference->plan);
  }
  gradients = {};
  row.measured.peak_bytes = ledger.peak_bytes();
  row.measured.peak_phase = ledger.peak_phase();
  row.measured.by_tag = ledger.at_peak();
  row.measured.high_water = ledger.high_water();
  row.measured.os_peak_bytes = space->os_peak_bytes();
  ledger.attach(nullptr);  // the samples below run untraced
  row.timeline = std::move(timeline);
  const std::vector<double> first = timer->intervals_ms();  // fwd, the capture, bwd
  if (reference) row.check = reference->judge(problem, output, input_grad, context_grad);

  // Warm-up (the measured pass counts as the first run), then samples until the median is steady,
  // rotating input sets so that no sample finds its inputs in a cache.
  const SamplingPolicy& policy = options.sampling;
  int warmups_done = 1;
  double warmup_ms = first[0] + first[2];
  int64_t next_set = 1;
  std::vector<double> fwd_ms, bwd_ms;
  row.gpu_start = device.gpu_state();  // the GPU's clocks and throttling around the timed runs
  auto sampling_start = std::chrono::steady_clock::now();
  auto seconds_sampling = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - sampling_start).count();
  };
  while (true) {
    const bool warming_up = needs_more_warmup(policy, warmups_done, warmup_ms);
    if (!warming_up && !needs_more_samples(policy, {&fwd_ms, &bwd_ms}, seconds_sampling())) break;
    const int64_t set = next_set++ % s.params.input_sets;
    const DeviceRange range(device, pass_range(warming_up ? "warm-up" : "sample"));
    if (options.cold) device.flush_caches();
    ledger.set_phase(Phase::fwd);
    timer->mark();
    stack.forward(inputs[set].X0.data(), inputs[set].context());
    timer->mark();
    ledger.set_phase(Phase::bwd);
    const LayerStack::Gradients sample_gradients =
        stack.backward(inputs[set].X0.data(), inputs[set].dO.data(), inputs[set].context());
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
  row.gpu_end = device.gpu_state();
  row.fwd = summarize(std::move(fwd_ms), policy.max_noise);
  row.bwd = summarize(std::move(bwd_ms), policy.max_noise);

  // The measured computation once more on input set 0, untimed: the same bits again? (Atomic
  // accumulation makes some GPU kernels differ run to run.)
  const DeviceRange repeat_range(device, pass_range("repeat"));
  stack.forward(inputs[0].X0.data(), inputs[0].context());
  const uint64_t output_again =
      hash_finite(device, stack.output(), problem.dtype, problem, queries, "the output X_L", kFnvOffset);
  const LayerStack::Gradients gradients_again =
      stack.backward(inputs[0].X0.data(), inputs[0].dO.data(), inputs[0].context());
  device.synchronize();
  reproducibility.deterministic = hash_gradients(device, problem, gradients_again, output_again) == results_hash;
}

}  // namespace

Runner::Runner(Device& device, RunOptions options) : device_(device), options_(std::move(options)) {}

std::vector<Row> Runner::plan(const Problem& problem, std::span<Implementation* const> implementations) {
  validate(problem);
  return preflight(device_, options_, problem, implementations, settle(device_, options_, problem));
}

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
    if (on_start_) on_start_(problem, k);
    try {
      const DeviceRange range(device_, options_.name_ranges ? fmt::format("{} {}", row.impl, problem.describe()) : "");
      measure(device_, options_, problem, *implementations[k], setting, reference, row);
      if (row.check && !row.check->passed()) {
        row.status = Status::failed;
        row.reason = failed_check_reason(*row.check);
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
                              std::span<const float> dO, std::span<const float> C) {
  validate(problem);
  const int64_t elements = problem.q_elements();
  const int64_t context_elements = problem.self_attention() ? 0 : problem.kv_elements();
  if (int64_t(X0.size()) != elements || int64_t(dO.size()) != elements || int64_t(C.size()) != context_elements)
    throw UsageError(fmt::format("inputs hold {}, {} and {} values, the problem needs {}, {} and {}", X0.size(),
                                 dO.size(), C.size(), elements, elements, context_elements));
  if (auto why = implementation.unsupported(problem)) throw UsageError(*why);
  MemoryLedger ledger;
  std::unique_ptr<MemorySpace> space = device_.open_space(ledger);
  RawBuffer X0_device(*space, Tag::input, elements * element_bytes(problem.dtype));
  RawBuffer dO_device(*space, Tag::input, elements * element_bytes(problem.dtype));
  RawBuffer C_device;
  device_.upload(X0, problem.dtype, X0_device.data());
  device_.upload(dO, problem.dtype, dO_device.data());
  if (context_elements > 0) {
    C_device = RawBuffer(*space, Tag::input, context_elements * element_bytes(problem.dtype));
    device_.upload(C, problem.dtype, C_device.data());
  }
  const void* context = C_device.empty() ? nullptr : C_device.data();
  LayerStack stack(problem, implementation, device_, *space, options_.seed);
  stack.forward(X0_device.data(), context);
  Pass pass;
  pass.output = device_.download(stack.output(), problem.dtype, 0, elements);
  const LayerStack::Gradients gradients = stack.backward(X0_device.data(), dO_device.data(), context);
  device_.synchronize();
  const Dtype gradient_dtype = device_.gradient_dtype(problem);
  pass.input_grad = device_.download(gradients.input.data(), gradient_dtype, 0, elements);
  if (context_elements > 0)
    pass.context_grad = device_.download(gradients.context.data(), gradient_dtype, 0, context_elements);
  return pass;
}

}  // namespace flashbench
