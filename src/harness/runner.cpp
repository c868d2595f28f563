#include "flashbench/harness/runner.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <new>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/os_memory.hpp"
#include "flashbench/core/timeline.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/harness/reference.hpp"
#include "flashbench/harness/stack.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {

namespace {

// Which part of layer 0 of input set 0 the float64 reference covers (the layers are alike and
// independent, and so are heads). `heads` are flattened B·H query heads: the whole groups of the K/V
// heads in `kv_heads` (then dK and dV of those K/V heads are compared, each a sum over its whole
// group), or single query heads where even one group is past the budget (then dK and dV are not
// compared, and the row says so). Kind::whole computes them whole; Kind::sampled computes the exact
// row statistics of every query row of those heads and then O and dQ of `query_rows` and dK and dV
// of `key_rows`; Kind::none checks nothing, with the reason.
struct ReferencePlan {
  enum class Kind { none, whole, sampled } kind = Kind::none;
  std::vector<int64_t> heads;      // flattened B·H query heads, in order
  std::vector<int64_t> kv_heads;   // flattened B·G K/V heads whose every query head is in `heads`
  std::vector<int64_t> query_rows; // Kind::sampled: rows of every head in `heads`
  std::vector<int64_t> key_rows;   // Kind::sampled: rows of every K/V head in `kv_heads`
  std::string not_checked;         // Kind::none: why
  std::string partial;             // what is not compared, and why (dK and dV of partial groups)
  int64_t working_bytes = 0;       // host memory while it is computed [bytes]
  int64_t kept_bytes = 0;          // host memory it and the captured outputs hold afterwards [bytes]
  double flop = 0;                 // the work of one reference computation on the plan's heads [FLOP]
  bool groups_whole() const { return !kv_heads.empty(); }
};

// `count` rows of `rows` spread out: the last and the first, then a stride prime to most sizes.
std::vector<int64_t> sample_rows(int64_t rows, int64_t count) {
  std::vector<int64_t> sample;
  for (int64_t k = 0; k < count && k < rows; ++k) sample.push_back((k * 7919 + rows - 1) % rows);
  sample.push_back(0);
  std::sort(sample.begin(), sample.end());
  sample.erase(std::unique(sample.begin(), sample.end()), sample.end());
  return sample;
}

constexpr int64_t kSampledRows = 16;
// The sampled check may cost this many times the budget of the whole one: it runs only where the
// whole one does not fit, and a large run without any check of its backward is worse than a slower
// check (N = 64K, d = 128: about 4.4e12 FLOP a head).
constexpr double kSampledBudgetFactor = 20;

ReferencePlan plan_reference(const Problem& p, const RunOptions& options) {
  ReferencePlan plan;
  if (!options.check) return plan;
  const int64_t BH = p.heads_total(), BG = p.batch * p.key_heads(), r = p.group_size();
  const int64_t N = p.seq, Nk = p.key_seq(), d = p.head_dim;
  const double budget = options.reference_flop_budget;
  // The first and the last K/V head with all their query heads (an indexing error past head 0 shows
  // in the last), then the first alone; then single query heads, first and last, then the first.
  struct Choice {
    std::vector<int64_t> kv_heads, heads;
  };
  std::vector<Choice> choices;
  for (const std::vector<int64_t>& groups : {BG >= 2 ? std::vector<int64_t>{0, BG - 1} : std::vector<int64_t>{0},
                                             std::vector<int64_t>{0}}) {
    Choice choice{groups, {}};
    for (int64_t g : groups)
      for (int64_t h = g * r; h < (g + 1) * r; ++h) choice.heads.push_back(h);
    choices.push_back(choice);
  }
  if (r > 1) {
    choices.push_back({{}, BH >= 2 ? std::vector<int64_t>{0, BH - 1} : std::vector<int64_t>{0}});
    choices.push_back({{}, {0}});
  }
  const auto take = [&](ReferencePlan::Kind kind, const Choice& choice) {
    plan.kind = kind;
    plan.heads = choice.heads;
    plan.kv_heads = choice.kv_heads;
    if (!plan.groups_whole())
      plan.partial = fmt::format("dK and dV not compared: one K/V head's group of {} query heads is over the check's "
                                 "budget",
                                 r);
    const int64_t heads = int64_t(plan.heads.size());
    // Host copies of the heads' inputs (Q, dO and K, V per head or per group) in double.
    const int64_t inputs = (2 * heads * N * d + 2 * heads * Nk * d) * 8;
    plan.flop = kind == ReferencePlan::Kind::whole
                    ? reference_layer_flop(p, heads)
                    : reference_sampled_flop(p, heads, kSampledRows + 1, kSampledRows + 1);
    if (kind == ReferencePlan::Kind::whole) {
      // Inputs; P and dS of one head and its dK, dV; the exact and the emulated results; the captured
      // outputs (float).
      plan.working_bytes = inputs + 2 * N * Nk * 8 + 2 * Nk * d * 8 + 2 * (2 * heads * N * d + 2 * heads * Nk * d) * 8;
      plan.kept_bytes = (2 * heads * N * d + 2 * heads * Nk * d) * (2 * 8 + 4);
    } else {
      plan.query_rows = sample_rows(N, kSampledRows);
      plan.key_rows = sample_rows(Nk, kSampledRows);
      const int64_t sampled = 2 * heads * (int64_t(plan.query_rows.size()) + int64_t(plan.key_rows.size())) * d;
      plan.working_bytes = inputs + N * (3 * 8 + Nk * 8) + 2 * sampled * 8;
      plan.kept_bytes = sampled * (2 * 8 + 4);
    }
  };
  for (const Choice& choice : choices)
    if (reference_layer_flop(p, int64_t(choice.heads.size())) <= budget) {
      take(ReferencePlan::Kind::whole, choice);
      return plan;
    }
  for (const Choice& choice : choices)
    if (reference_sampled_flop(p, int64_t(choice.heads.size()), kSampledRows + 1, kSampledRows + 1) <=
        kSampledBudgetFactor * budget) {
      take(ReferencePlan::Kind::sampled, choice);
      return plan;
    }
  plan.not_checked = fmt::format("the sampled float64 reference of one head would take {:.2g} FLOP, over {:.0f}x the "
                                 "budget of {:.2g}",
                                 reference_sampled_flop(p, 1, kSampledRows + 1, kSampledRows + 1),
                                 kSampledBudgetFactor, budget);
  return plan;
}

double relative_error(std::span<const double> x, std::span<const double> ref, double scale_if_zero) {
  const std::vector<float> narrowed(x.begin(), x.end());
  return max_relative_error(narrowed, ref, scale_if_zero);
}

// A [B, heads, rows, d] tensor on the device: Q, O, dO and dQ have H heads and N rows; K, V, dK and
// dV have G heads and N_k rows.
struct TensorShape {
  int64_t heads = 0, rows = 0;
  static TensorShape queries(const Problem& p) { return {p.heads, p.seq}; }
  static TensorShape keys(const Problem& p) { return {p.key_heads(), p.key_seq()}; }
  int64_t per_head(const Problem& p) const { return rows * p.head_dim; }
};

// Heads `heads` of a tensor on the device, whole, one after the other.
std::vector<float> gather_heads(Device& device, const void* tensor, Dtype dtype, std::span<const int64_t> heads,
                                int64_t per_head) {
  std::vector<float> out;
  for (int64_t h : heads) {
    const std::vector<float> part = device.download(tensor, dtype, h * per_head, per_head);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Rows `rows` of heads `heads` of a tensor on the device, head after head.
std::vector<float> gather_rows(Device& device, const void* tensor, Dtype dtype, std::span<const int64_t> heads,
                               std::span<const int64_t> rows, const Problem& p, TensorShape shape) {
  std::vector<float> out;
  for (int64_t h : heads)
    for (int64_t row : rows) {
      const std::vector<float> part = device.download(tensor, dtype, (h * shape.rows + row) * p.head_dim, p.head_dim);
      out.insert(out.end(), part.begin(), part.end());
    }
  return out;
}

// What the plan compares of a query-side tensor (O, dQ: its heads) or a key-side one (dK, dV: its K/V
// heads), whole or in its sampled rows.
std::vector<float> gather_queries(Device& device, const void* tensor, Dtype dtype, const Problem& p,
                                  const ReferencePlan& plan) {
  const TensorShape shape = TensorShape::queries(p);
  if (plan.kind == ReferencePlan::Kind::sampled)
    return gather_rows(device, tensor, dtype, plan.heads, plan.query_rows, p, shape);
  return gather_heads(device, tensor, dtype, plan.heads, shape.per_head(p));
}
std::vector<float> gather_keys(Device& device, const void* tensor, Dtype dtype, const Problem& p,
                               const ReferencePlan& plan) {
  const TensorShape shape = TensorShape::keys(p);
  if (plan.kind == ReferencePlan::Kind::sampled)
    return gather_rows(device, tensor, dtype, plan.kv_heads, plan.key_rows, p, shape);
  return gather_heads(device, tensor, dtype, plan.kv_heads, shape.per_head(p));
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

// The hazards of a problem's inputs, named for the row: logits beyond what a 16-bit tensor holds,
// where a kernel that stores S in the storage dtype (v1 keeps S) would hold inf. Q and K are
// independent, so the logits |S_ij| = scale·|q_i·k_j| of a layer are bounded (Cauchy-Schwarz) by
// scale·max_i|q_i|·max_j|k_j|, which they need not reach.
std::vector<std::string> input_hazards(const Problem& p, double logit_bound) {
  std::vector<std::string> hazards;
  constexpr double kFp16Max = 65504;
  if (p.dtype == Dtype::fp16 && logit_bound > kFp16Max)
    hazards.push_back(fmt::format("fp16 overflow: the logits may reach |S| = {:.3g}, beyond fp16's largest {:.0f}; "
                                  "S stored in fp16 is inf there",
                                  logit_bound, kFp16Max));
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

// FLASHBENCH_INJECT_SLOWDOWN=FACTOR (> 1) makes every timed pass take FACTOR times as long (it waits
// out the difference inside the timed region), so that a test can make a regression on purpose and
// see compare catch it; nothing else reads it. 1 when unset or not a number above 1.
double injected_slowdown() {
  const char* text = std::getenv("FLASHBENCH_INJECT_SLOWDOWN");
  if (!text) return 1;
  char* end = nullptr;
  const double factor = std::strtod(text, &end);
  return end != text && *end == '\0' && factor > 1 && factor < 100 ? factor : 1;
}

uint64_t problem_seed(const RunOptions& options, const Problem& problem) {
  return options.seed ^ std::hash<std::string>{}(problem.describe());
}

// The tensors of one layer's inputs, in the order of their seeds.
enum class InputTensor { Q, K, V, dO };
constexpr int64_t kInputTensors = 4;

// The seed of one input tensor: input set `set`, layer `layer`; every tensor of a problem its own.
uint64_t tensor_seed(uint64_t seed, int64_t set, int64_t layer, InputTensor tensor) {
  return seed + uint64_t(((set * kMaxLayers + layer) * kInputTensors) + int64_t(tensor));
}

// Multiplies `elements` values of a tensor on the device by `scale`, a chunk at a time on the host.
void scale_on_device(Device& device, Dtype dtype, void* tensor, int64_t elements, double scale) {
  for (int64_t start = 0; start < elements; start += kScanChunk) {
    std::vector<float> part = device.download(tensor, dtype, start, std::min(kScanChunk, elements - start));
    for (float& value : part) value = float(value * scale);
    device.upload(part, dtype, static_cast<char*>(tensor) + start * element_bytes(dtype));
  }
}

// The bytes of one layer's inputs, Q, K, V and dO, in the storage dtype. [bytes]
int64_t layer_input_bytes(const Problem& p) {
  return (2 * p.q_elements() + 2 * p.kv_elements()) * element_bytes(p.dtype);
}

// One layer's inputs on the device, tag input: Q, K, V standard normal times `scale` (--input-scale:
// the logits grow as its square), dO standard normal, each drawn independently, as the peers draw
// them.
struct LayerInputSet {
  RawBuffer Q, K, V, dO;
  LayerInputSet(Device& device, MemorySpace& space, const Problem& p, uint64_t seed, int64_t set, int64_t layer,
                double scale) {
    const auto make = [&](RawBuffer& buffer, int64_t elements, InputTensor tensor, double factor) {
      buffer = RawBuffer(space, Tag::input, elements * element_bytes(p.dtype));
      device.fill_normal(p.dtype, buffer.data(), elements, tensor_seed(seed, set, layer, tensor));
      if (factor != 1) scale_on_device(device, p.dtype, buffer.data(), elements, factor);
    };
    make(Q, p.q_elements(), InputTensor::Q, scale);
    make(K, p.kv_elements(), InputTensor::K, scale);
    make(V, p.kv_elements(), InputTensor::V, scale);
    make(dO, p.q_elements(), InputTensor::dO, 1);
  }
  LayerData data() const { return {{Q.data(), K.data(), V.data()}, dO.data()}; }
};

// One input set: every layer's inputs.
struct InputSet {
  std::vector<LayerInputSet> layers;
  std::vector<LayerData> data;
  InputSet(Device& device, MemorySpace& space, const Problem& p, uint64_t seed, int64_t set, double scale) {
    layers.reserve(size_t(p.layers));
    for (int64_t i = 0; i < p.layers; ++i) {
      layers.emplace_back(device, space, p, seed, set, i, scale);
      data.push_back(layers.back().data());
    }
  }
};

// Folds every input of the set into `hash`, layer by layer (Q, K, V, dO); throws as hash_finite does.
uint64_t hash_inputs(Device& device, const Problem& p, const InputSet& inputs, uint64_t hash) {
  const TensorShape queries = TensorShape::queries(p), keys = TensorShape::keys(p);
  for (size_t i = 0; i < inputs.layers.size(); ++i) {
    const LayerInputSet& layer = inputs.layers[i];
    hash = hash_finite(device, layer.Q.data(), p.dtype, p, queries, fmt::format("the input Q of layer {}", i), hash);
    hash = hash_finite(device, layer.K.data(), p.dtype, p, keys, fmt::format("the input K of layer {}", i), hash);
    hash = hash_finite(device, layer.V.data(), p.dtype, p, keys, fmt::format("the input V of layer {}", i), hash);
    hash = hash_finite(device, layer.dO.data(), p.dtype, p, queries, fmt::format("the input dO of layer {}", i), hash);
  }
  return hash;
}

// The largest logit bound over the layers of the set (input_hazards).
double logit_bound(Device& device, const Problem& p, const InputSet& inputs) {
  double bound = 0;
  for (const LayerInputSet& layer : inputs.layers)
    bound = std::max(bound, double(p.scale()) * max_row_norm(device, layer.Q.data(), p.dtype, p, TensorShape::queries(p)) *
                                max_row_norm(device, layer.K.data(), p.dtype, p, TensorShape::keys(p)));
  return bound;
}

// Folds every layer's output O_i, then layer 0's dQ, dK, dV, into `hash`; throws as hash_finite does.
uint64_t hash_outputs(Device& device, const Problem& p, const LayerStack& stack, uint64_t hash) {
  for (int64_t i = 0; i < p.layers; ++i)
    hash = hash_finite(device, stack.output(i), p.dtype, p, TensorShape::queries(p),
                       fmt::format("the output O of layer {}", i), hash);
  return hash;
}
uint64_t hash_gradients(Device& device, const Problem& p, const LayerStack::Gradients& gradients, uint64_t hash) {
  const Dtype dtype = device.gradient_dtype(p);
  hash = hash_finite(device, gradients.dQ.data(), dtype, p, TensorShape::queries(p), "the gradient dQ of layer 0", hash);
  hash = hash_finite(device, gradients.dK.data(), dtype, p, TensorShape::keys(p), "the gradient dK of layer 0", hash);
  return hash_finite(device, gradients.dV.data(), dtype, p, TensorShape::keys(p), "the gradient dV of layer 0", hash);
}

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

// What an implementation produced of what the reference covers: layer 0's O, dQ, dK, dV (dK and dV
// empty where the plan does not compare them).
struct Captured {
  std::vector<float> O, dQ, dK, dV;
};

// The exact and the naive results on the plan's part of layer 0, and the judgement.
struct Reference {
  ReferencePlan plan;
  std::vector<double> O, dQ, dK, dV;  // exact
  // The naive computation's error against each of them (dK, dV: empty where the plan compares fewer).
  std::optional<double> naive_O, naive_dQ, naive_dK, naive_dV;
  double max_abs_score = 0;
  double seconds = 0;  // the time it took, from its inputs to its results [s]
  // The scale a tensor that is zero throughout is judged against (dK, dV counted where compared).
  double scale() const { return layer_scale(O, dQ, dK, dV); }

  // FlashAttention's bar: the error may be a small multiple of that of the same computation done
  // naively in the storage precision, plus what exp(S − LSE) costs in fp32 at the largest logit
  // (its condition number is its argument) and a floor for summation order. Each tensor is compared
  // apart, so that an error moving between dK and dV cannot cancel.
  Check judge(const Problem& p, const Captured& got) const {
    Check check;
    const double zero_scale = scale();
    check.reference = plan.kind == ReferencePlan::Kind::sampled
                          ? fmt::format("float64 ({} query and {} key rows of {})", plan.query_rows.size(),
                                        plan.key_rows.size(), counted(int64_t(plan.heads.size()), "head"))
                          : "float64";
    auto compare = [&](const char* name, const std::vector<float>& mine, const std::vector<double>& exact,
                       std::optional<double> naive) {
      const double error = max_relative_error(mine, exact, zero_scale);
      check.tensors.push_back({name, error, naive});
      check.max_rel_err = std::max(check.max_rel_err, error);
    };
    compare("O", got.O, O, naive_O);
    compare("dQ", got.dQ, dQ, naive_dQ);
    if (plan.groups_whole()) {
      compare("dK", got.dK, dK, naive_dK);
      compare("dV", got.dV, dV, naive_dV);
    }
    // The bar is made of the largest naive error.
    for (const std::optional<double>& error : {naive_O, naive_dQ, naive_dK, naive_dV})
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
  uint64_t seed = 0;                      // of the problem's inputs (tensor_seed)
  double input_scale = 1;                 // Q, K and V are standard normal times this
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
    // The reference reads layer 0 of input set 0 as the device filled it: that layer on the device,
    // and its working memory on the host.
    const int64_t layer_inputs = layer_input_bytes(problem);
    const int64_t host_need = s.reference.working_bytes + (device.shares_host_memory() ? layer_inputs : 0);
    std::optional<std::string> why;
    if (s.host_available && host_need > *s.host_available)
      why = fmt::format("the float64 reference needs {} of host memory, {} available", format_bytes(host_need),
                        format_bytes(*s.host_available));
    else if (!device.shares_host_memory() && s.limit && layer_inputs > *s.limit)
      why = fmt::format("the reference's inputs need {}, {} available", format_bytes(layer_inputs),
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

// The float64 reference on layer 0 of input set 0 as the device filled it, or why there is none.
std::optional<Reference> make_reference(Device& device, const Problem& problem, const Setting& s,
                                        std::string& why_not) {
  const ReferencePlan& plan = s.reference;
  if (plan.kind == ReferencePlan::Kind::none) {
    why_not = plan.not_checked;
    return std::nullopt;
  }
  try {
    const auto began = std::chrono::steady_clock::now();
    MemoryLedger ledger(s.limit.value_or(MemoryLedger::kUnlimited));
    std::unique_ptr<MemorySpace> space = device.open_space(ledger);
    const LayerInputSet inputs(device, *space, problem, s.seed, 0, 0, s.input_scale);
    const int64_t r = problem.group_size();
    // K and V of the plan's K/V heads (whole groups), or of each query head's K/V head.
    std::vector<int64_t> kv_of_heads = plan.kv_heads;
    if (!plan.groups_whole())
      for (int64_t h : plan.heads) kv_of_heads.push_back(h / r);
    const int64_t q_head = problem.seq * problem.head_dim, kv_head = problem.key_seq() * problem.head_dim;
    const auto host = [&](const RawBuffer& tensor, std::span<const int64_t> heads, int64_t per_head) {
      const std::vector<float> stored = gather_heads(device, tensor.data(), problem.dtype, heads, per_head);
      return std::vector<double>(stored.begin(), stored.end());
    };
    const std::vector<double> Q = host(inputs.Q, plan.heads, q_head), dO = host(inputs.dO, plan.heads, q_head);
    const std::vector<double> K = host(inputs.K, kv_of_heads, kv_head), V = host(inputs.V, kv_of_heads, kv_head);
    ReferenceShape shape{int64_t(plan.heads.size()), problem.seq, problem.head_dim, problem.causal, problem.key_seq(),
                         plan.groups_whole() ? r : 1};
    shape.dropout = problem.dropout;  // layer 0's mask, keyed by the problem's seed
    shape.dropout_seed = s.seed;
    shape.dropout_offset = 0;
    shape.head_index = plan.heads;
    Reference ref;
    ref.plan = plan;
    const auto keep = [&](auto exact, const auto& naive) {
      ref.max_abs_score = exact.max_abs_score;
      ref.O = std::move(exact.O);
      ref.dQ = std::move(exact.dQ);
      if (plan.groups_whole()) {
        ref.dK = std::move(exact.dK);
        ref.dV = std::move(exact.dV);
      }
      const double scale = ref.scale();
      ref.naive_O = relative_error(naive.O, ref.O, scale);
      ref.naive_dQ = relative_error(naive.dQ, ref.dQ, scale);
      if (plan.groups_whole()) {
        ref.naive_dK = relative_error(naive.dK, ref.dK, scale);
        ref.naive_dV = relative_error(naive.dV, ref.dV, scale);
      }
    };
    if (plan.kind == ReferencePlan::Kind::whole) {
      keep(reference_layer(shape, Q, K, V, dO), reference_layer(shape, Q, K, V, dO, problem.dtype));
    } else {
      keep(reference_sampled(shape, Q, K, V, dO, plan.query_rows, plan.key_rows),
           reference_sampled(shape, Q, K, V, dO, plan.query_rows, plan.key_rows, problem.dtype));
    }
    ref.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    return ref;
  } catch (const OutOfMemory& e) {
    why_not = fmt::format("no memory for the reference's inputs: {}", e.what());
  } catch (const std::bad_alloc&) {
    why_not = "the system refused the float64 reference's memory";
  } catch (const RuntimeFailure& e) {
    why_not = fmt::format("the reference's inputs could not be made: {}", e.what());
  }
  return std::nullopt;
}

// What the outside view of a foreign implementation's memory (a plugin's) may rise past the
// ledger's peak before its row says so: thread stacks, the check's captured outputs and allocator
// rounding stay below it (docs/memory.md, "Tracked peak and the operating system's peak"). [bytes]
constexpr int64_t kUntrackedAllowance = int64_t{32} << 20;

// A plugin allocates with its own hands where it likes: where the outside view (CPU: the resident
// set's high-water mark) rose well past what the ledger counted, its row names the difference.
void note_untracked_memory(Row& row) {
  if (!row.measured.os_peak_bytes) return;
  const int64_t excess = *row.measured.os_peak_bytes - row.measured.peak_bytes;
  if (excess <= std::max(kUntrackedAllowance, row.measured.peak_bytes / 4)) return;
  row.hazards.push_back(fmt::format("untracked memory: the operating system saw {} at the peak, {} more than the "
                                    "ledger's {}: the plugin allocates outside the buffers and workspace it is given",
                                    format_bytes(*row.measured.os_peak_bytes), format_bytes(excess),
                                    format_bytes(row.measured.peak_bytes)));
}

// How long the device is kept busy before each timed region (Device::occupy). [ms]
constexpr double kOccupyMs = 0.5;

// One implementation's measurement, in a fresh memory space behind a fresh ledger, alive from its
// measured pass (memory, outputs for the check) through its warm-up and samples to its repeat pass.
// The runner keeps those of a configuration alive together where they fit, so that their samples
// are taken in rounds (A B C, B C A, ...) and a drift of the device's state (clocks under a power
// cap, the host's load) falls on all of them alike. Every step throws what the device or the
// implementation throws; the runner turns it into the row's status.
class Measurement {
 public:
  // Sets up the inputs and the layer stack and runs the measured pass (and the check).
  Measurement(Device& device, const RunOptions& options, const Problem& problem, Implementation& implementation,
              const Setting& s, const std::optional<Reference>& reference, Row& row);
  Measurement(const Measurement&) = delete;
  Measurement& operator=(const Measurement&) = delete;

  // Untimed runs until the policy's warm-up is done (the measured pass counts as the first).
  void warm_up();
  // One sample: the forward and the backward, each timed from a busy device, and the GPU's clocks
  // around them.
  void sample();
  // The stopping rule holds: enough samples, steady medians, or the time or count spent.
  bool done() const {
    const size_t taken = fwd_ms_.size();
    return (taken >= 1 && past(options_.hard_deadline)) ||
           (taken >= size_t(options_.sampling.min_samples) && past(options_.deadline)) ||
           !needs_more_samples(options_.sampling, {&fwd_ms_, &bwd_ms_}, sampling_seconds_);
  }
  // The summaries, then the measured computation once more: the same bits again?
  void finish();

 private:
  static bool past(const std::optional<std::chrono::steady_clock::time_point>& deadline) {
    return deadline && std::chrono::steady_clock::now() >= *deadline;
  }
  // A device range "<impl> <pass>" (--profile), or none.
  std::string pass_range(std::string_view pass) const {
    return options_.name_ranges ? fmt::format("{} {}", implementation_.name(), pass) : std::string();
  }
  // The work between two marks of the timer, started on a busy device, so that what the host does
  // to queue it is hidden the same way for every implementation (Device::occupy): its time is the
  // device's work alone.
  template <class Work>
  void timed(Work&& work) {
    device_.occupy(kOccupyMs);
    timer_->mark();
    const auto begin = std::chrono::steady_clock::now();
    work();
    if (slowdown_ > 1) {  // the tests' hook (FLASHBENCH_INJECT_SLOWDOWN): the work made that much slower
      device_.synchronize();
      std::this_thread::sleep_for((std::chrono::steady_clock::now() - begin) * (slowdown_ - 1));
    }
    timer_->mark();
  }
  // The inputs (every set), their hashes and hazards, the layer stack and the timer.
  void set_up();
  // The first pass, untimed by the samples: memory (the ledger and the outside view) and the
  // outputs for the check, which it then judges.
  void measured_pass(const std::optional<Reference>& reference);
  // dQ (and dK, dV where the plan compares them) of the plan's part of layer 0, for the check.
  void capture_gradients(const LayerStack::Gradients& gradients, const ReferencePlan& plan, Captured& captured) const;
  // The ledger's and the outside view's peaks of the measured pass into the row.
  void record_memory();
  // One forward and one backward on the next input set, timed: [fwd, the gap, bwd] in ms.
  std::vector<double> pass();

  Device& device_;
  const RunOptions& options_;
  const Problem& problem_;
  Implementation& implementation_;
  const Setting& setting_;
  Row& row_;
  MemoryLedger ledger_;
  std::unique_ptr<MemorySpace> space_;
  std::vector<InputSet> inputs_;
  std::unique_ptr<LayerStack> stack_;
  std::unique_ptr<PhaseTimer> timer_;
  uint64_t results_hash_ = 0;
  int warmups_done_ = 1;
  double warmup_ms_ = 0;
  int64_t next_set_ = 1;
  std::vector<double> fwd_ms_, bwd_ms_;
  std::vector<SampleClock> clocks_;  // one a sample where the device reads its clocks
  double sampling_seconds_ = 0;      // spent in this implementation's samples, for the stopping rule
  const double slowdown_ = injected_slowdown();
};

Measurement::Measurement(Device& device, const RunOptions& options, const Problem& problem,
                         Implementation& implementation, const Setting& s, const std::optional<Reference>& reference,
                         Row& row)
    : device_(device),
      options_(options),
      problem_(problem),
      implementation_(implementation),
      setting_(s),
      row_(row),
      ledger_(s.limit.value_or(MemoryLedger::kUnlimited)),
      space_(device.open_space(ledger_)) {
  set_up();
  measured_pass(reference);
}

void Measurement::set_up() {
  space_->reset_os_peak();
  ledger_.set_phase(Phase::setup);
  for (int64_t set = 0; set < setting_.params.input_sets; ++set)
    inputs_.emplace_back(device_, *space_, problem_, setting_.seed, set, setting_.input_scale);
  Reproducibility& reproducibility = row_.reproducibility.emplace();
  reproducibility.seed = options_.seed;
  reproducibility.input_scale = setting_.input_scale;
  reproducibility.inputs_hash = hex(hash_inputs(device_, problem_, inputs_[0], kFnvOffset));
  row_.hazards = input_hazards(problem_, logit_bound(device_, problem_, inputs_[0]));
  stack_ = std::make_unique<LayerStack>(problem_, implementation_, device_, *space_, setting_.seed);
  if (options_.name_ranges) stack_->name_ranges(std::string(implementation_.name()));
  timer_ = device_.timer();
  inject_failure(implementation_);
}

void Measurement::measured_pass(const std::optional<Reference>& reference) {
  device_.synchronize();
  ledger_.reset_peaks();
  if (options_.cold) device_.flush_caches();
  // The timeline starts where the peak does, from the same live bytes, so that its replay reaches
  // exactly the measured peak.
  std::shared_ptr<MemoryTimeline> timeline;
  if (options_.record_timeline) {
    timeline = std::make_shared<MemoryTimeline>(ledger_.live());
    ledger_.attach(timeline.get());
  }
  // Detached before the timeline goes, however this pass ends: the stack's buffers outlive it.
  struct Detach {
    MemoryLedger& ledger;
    ~Detach() { ledger.attach(nullptr); }
  } const detach{ledger_};
  std::optional<DeviceRange> measured_range;
  measured_range.emplace(device_, pass_range("measured"));
  ledger_.set_phase(Phase::fwd);
  timed([&] {
    const ScopedSpan span(timeline.get(), "forward");
    stack_->forward(inputs_[0].data);
  });
  const uint64_t output_hash = hash_outputs(device_, problem_, *stack_, kFnvOffset);
  Captured captured;
  if (reference) captured.O = gather_queries(device_, stack_->output(0), problem_.dtype, problem_, reference->plan);
  row_.measured.kept_bytes = ledger_.live()[Tag::kept];
  ledger_.set_phase(Phase::bwd);
  LayerStack::Gradients gradients;
  timed([&] {
    const ScopedSpan span(timeline.get(), "backward");
    gradients = stack_->backward(inputs_[0].data);
  });
  device_.synchronize();
  measured_range.reset();
  results_hash_ = hash_gradients(device_, problem_, gradients, output_hash);
  row_.reproducibility->results_hash = hex(results_hash_);
  if (reference) capture_gradients(gradients, reference->plan, captured);
  gradients = {};
  record_memory();
  ledger_.attach(nullptr);  // the samples below run untraced
  row_.timeline = std::move(timeline);
  const std::vector<double> first = timer_->intervals_ms();  // fwd, the gap, bwd
  warmup_ms_ = first[0] + first[2];
  if (reference) {
    row_.check = reference->judge(problem_, captured);
    row_.check->not_compared = reference->plan.partial;
    row_.check->reference_seconds = reference->seconds;
  }
}

void Measurement::capture_gradients(const LayerStack::Gradients& gradients, const ReferencePlan& plan,
                                    Captured& captured) const {
  const Dtype gradient_dtype = device_.gradient_dtype(problem_);
  captured.dQ = gather_queries(device_, gradients.dQ.data(), gradient_dtype, problem_, plan);
  if (plan.groups_whole()) {
    captured.dK = gather_keys(device_, gradients.dK.data(), gradient_dtype, problem_, plan);
    captured.dV = gather_keys(device_, gradients.dV.data(), gradient_dtype, problem_, plan);
  }
}

void Measurement::record_memory() {
  row_.measured.peak_bytes = ledger_.peak_bytes();
  row_.measured.peak_phase = ledger_.peak_phase();
  row_.measured.by_tag = ledger_.at_peak();
  row_.measured.high_water = ledger_.high_water();
  row_.measured.os_peak_bytes = space_->os_peak_bytes();
}

std::vector<double> Measurement::pass() {
  // Input sets rotate, so that no sample finds its inputs in a cache.
  const InputSet& set = inputs_[size_t(next_set_++ % setting_.params.input_sets)];
  if (options_.cold) device_.flush_caches();
  ledger_.set_phase(Phase::fwd);
  timed([&] { stack_->forward(set.data); });
  ledger_.set_phase(Phase::bwd);
  timed([&] { const LayerStack::Gradients sample_gradients = stack_->backward(set.data); });
  return timer_->intervals_ms();  // fwd, the gap, bwd
}

void Measurement::warm_up() {
  row_.gpu_start = device_.gpu_state();  // the GPU's clocks and throttling around the timed runs
  while (needs_more_warmup(options_.sampling, warmups_done_, warmup_ms_) && !past(options_.deadline)) {
    const DeviceRange range(device_, pass_range("warm-up"));
    const std::vector<double> times = pass();
    ++warmups_done_;
    warmup_ms_ += times[0] + times[2];
  }
}

void Measurement::sample() {
  const auto started = std::chrono::steady_clock::now();
  const std::optional<GpuState> before = device_.gpu_state();
  std::vector<double> times;
  {
    const DeviceRange range(device_, pass_range("sample"));
    times = pass();
  }
  if (const std::optional<GpuState> after = device_.gpu_state(); before && after)
    clocks_.push_back({after->sm_clock_mhz, after->clock_event_reasons,
                       sample_throttled(*before, *after, options_.sampling.throttle_threshold)});
  fwd_ms_.push_back(times[0]);
  bwd_ms_.push_back(times[2]);
  sampling_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

void Measurement::finish() {
  row_.gpu_end = device_.gpu_state();
  const SamplingPolicy& policy = options_.sampling;
  if ((options_.deadline || options_.hard_deadline) && needs_more_samples(policy, {&fwd_ms_, &bwd_ms_}, sampling_seconds_))
    row_.time_budget_cut = fmt::format("--time-budget: sampling stopped after {} (the stopping rule wanted more: "
                                       "at least {}, or the noise below {:g} %)",
                                       counted(int64_t(fwd_ms_.size()), "sample"), policy.min_samples,
                                       100 * policy.max_noise);
  // One reading covers a sample's forward and backward: the clocks are read after both.
  if (clocks_.size() != fwd_ms_.size()) clocks_.clear();
  row_.fwd = summarize(std::move(fwd_ms_), policy.max_noise, clocks_, policy.min_samples);
  row_.bwd = summarize(std::move(bwd_ms_), policy.max_noise, std::move(clocks_), policy.min_samples);

  // The measured computation once more on input set 0, untimed: the same bits again? (Atomic
  // accumulation makes some GPU kernels differ run to run.)
  const DeviceRange repeat_range(device_, pass_range("repeat"));
  stack_->forward(inputs_[0].data);
  const uint64_t output_again = hash_outputs(device_, problem_, *stack_, kFnvOffset);
  const LayerStack::Gradients gradients_again = stack_->backward(inputs_[0].data);
  device_.synchronize();
  row_.reproducibility->deterministic = hash_gradients(device_, problem_, gradients_again, output_again) == results_hash_;
}

// Why the implementations that will be measured cannot be alive together, or nothing: their
// modelled peaks side by side (each has its own space), with the harness's buffers once, within the
// device's limit.
std::optional<std::string> apart_because(const Device& device, const std::vector<Row>& rows, const Setting& s) {
  if (!s.limit) return std::nullopt;
  int64_t together = s.device_bytes + (device.shares_host_memory() ? s.host_bytes : 0);
  for (const Row& row : rows)
    if (row.status == Status::ok && row.model) together += row.model->peak_bytes;
  if (together <= *s.limit) return std::nullopt;
  return fmt::format("sampled alone: the implementations' modelled peaks side by side ({}) exceed the {} available",
                     format_bytes(together), format_bytes(*s.limit));
}

// One configuration's measurements, implementation by implementation: each from its measured pass
// (Measurement's constructor) through its warm-up and samples to its finish, into its row. Every
// step goes through attempt(): what it throws becomes the row's status, and its measurement (with
// all its memory) goes.
class ConfigurationMeasurement {
 public:
  // Makes the float64 reference the rows are checked against (or notes why there is none).
  ConfigurationMeasurement(Device& device, const RunOptions& options, const Problem& problem,
                           std::span<Implementation* const> implementations, const Setting& setting,
                           const Runner::StartObserver& on_start, std::vector<Row>& rows)
      : device_(device),
        options_(options),
        problem_(problem),
        implementations_(implementations),
        setting_(setting),
        on_start_(on_start),
        rows_(rows),
        reference_(make_reference(device, problem, setting, why_not_checked_)),
        live_(implementations.size()) {}
  ConfigurationMeasurement(const ConfigurationMeasurement&) = delete;
  ConfigurationMeasurement& operator=(const ConfigurationMeasurement&) = delete;

  // The implementations `measured` one after another, each alone from start to finish; `why` goes
  // into each row.
  void measure_apart(const std::vector<size_t>& measured, const std::string& why) {
    for (size_t k : measured) {
      rows_[k].sampled_alone = why;
      start(k);
      warm_up(k);
      sample_in_rounds({k});
      finish(k);
    }
  }
  // Together: every measured pass, then every warm-up, then the samples in rounds.
  void measure_together(const std::vector<size_t>& measured) {
    for (size_t k : measured) start(k);
    for (size_t k : measured) warm_up(k);
    std::vector<size_t> in_rounds;
    for (size_t k : measured)
      if (live_[k]) in_rounds.push_back(k);
    for (size_t k : in_rounds)
      for (size_t other : in_rounds)
        if (other != k) rows_[k].interleaved_with.push_back(rows_[other].implementation());
    sample_in_rounds(in_rounds);
    for (size_t k : in_rounds) finish(k);
  }

 private:
  // One step of implementation k's measurement; what it throws becomes the row's status, and its
  // measurement (with all its memory) goes.
  template <class Step>
  void attempt(size_t k, Step&& step) {
    Row& row = rows_[k];
    try {
      const DeviceRange range(device_, options_.name_ranges ? fmt::format("{} {}", row.impl, problem_.describe()) : "");
      step();
      return;
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
    live_[k].reset();
  }
  void start(size_t k) {
    if (rows_[k].status != Status::ok) return;
    if (options_.check && !reference_) rows_[k].not_checked = why_not_checked_;
    if (on_start_) on_start_(problem_, k);
    attempt(k, [&] {
      live_[k] = std::make_unique<Measurement>(device_, options_, problem_, *implementations_[k], setting_, reference_,
                                               rows_[k]);
    });
  }
  void warm_up(size_t k) {
    if (live_[k]) attempt(k, [&] { live_[k]->warm_up(); });
  }
  // Samples of the live measurements among `ks` in rounds, each round starting one later (A B C,
  // B C A, C A B, ...), until each one's stopping rule holds.
  void sample_in_rounds(const std::vector<size_t>& ks) {
    for (size_t round = 0;; ++round) {
      bool sampled = false;
      for (size_t j = 0; j < ks.size(); ++j) {
        const size_t k = ks[(round + j) % ks.size()];
        if (!live_[k] || live_[k]->done()) continue;
        sampled = true;
        attempt(k, [&] { live_[k]->sample(); });
      }
      if (!sampled) return;
    }
  }
  // The summaries and the repeat; then the row's verdict: untracked memory (a plugin's), a failed check.
  void finish(size_t k) {
    if (!live_[k]) return;
    attempt(k, [&] { live_[k]->finish(); });
    live_[k].reset();
    Row& row = rows_[k];
    if (row.status == Status::ok && implementations_[k]->foreign()) note_untracked_memory(row);
    if (row.status == Status::ok && row.check && !row.check->passed()) {
      row.status = Status::failed;
      row.reason = failed_check_reason(*row.check);
    }
  }

  Device& device_;
  const RunOptions& options_;
  const Problem& problem_;
  std::span<Implementation* const> implementations_;
  const Setting& setting_;
  const Runner::StartObserver& on_start_;
  std::vector<Row>& rows_;
  std::string why_not_checked_;  // where there is no reference (set before reference_ is made)
  const std::optional<Reference> reference_;
  std::vector<std::unique_ptr<Measurement>> live_;
};

}  // namespace

Runner::Runner(Device& device, RunOptions options) : device_(device), options_(std::move(options)) {}

std::vector<Row> Runner::plan(const Problem& problem, std::span<Implementation* const> implementations) {
  validate(problem);
  return preflight(device_, options_, problem, implementations, settle(device_, options_, problem));
}

double Runner::reference_flop(const Problem& problem) const { return plan_reference(problem, options_).flop; }

std::vector<Row> Runner::run(const Problem& problem, std::span<Implementation* const> implementations) {
  validate(problem);
  const Setting setting = settle(device_, options_, problem);
  std::vector<Row> rows = preflight(device_, options_, problem, implementations, setting);
  std::vector<size_t> measured;
  for (size_t k = 0; k < rows.size(); ++k)
    if (rows[k].status == Status::ok) measured.push_back(k);
  if (measured.empty()) return rows;

  ConfigurationMeasurement configuration(device_, options_, problem, implementations, setting, on_start_, rows);
  if (const std::optional<std::string> apart = measured.size() > 1 ? apart_because(device_, rows, setting) : std::nullopt)
    configuration.measure_apart(measured, *apart);
  else
    configuration.measure_together(measured);
  return rows;
}

Runner::Pass Runner::run_once(const Problem& problem, Implementation& implementation, const HostInputs& inputs) {
  validate(problem);
  if (problem.layers != 1)
    throw UsageError(fmt::format("one pass runs one layer, not {}", problem.layers));
  const int64_t q = problem.q_elements(), kv = problem.kv_elements();
  if (int64_t(inputs.Q.size()) != q || int64_t(inputs.K.size()) != kv || int64_t(inputs.V.size()) != kv ||
      int64_t(inputs.dO.size()) != q)
    throw UsageError(fmt::format("Q, K, V and dO hold {}, {}, {} and {} values, the problem needs {}, {}, {} and {}",
                                 inputs.Q.size(), inputs.K.size(), inputs.V.size(), inputs.dO.size(), q, kv, kv, q));
  if (auto why = implementation.unsupported(problem)) throw UsageError(*why);
  MemoryLedger ledger;
  std::unique_ptr<MemorySpace> space = device_.open_space(ledger);
  const auto upload = [&](std::span<const float> host) {
    RawBuffer buffer(*space, Tag::input, int64_t(host.size()) * element_bytes(problem.dtype));
    device_.upload(host, problem.dtype, buffer.data());
    return buffer;
  };
  const RawBuffer Q = upload(inputs.Q), K = upload(inputs.K), V = upload(inputs.V), dO = upload(inputs.dO);
  const LayerData layer{{Q.data(), K.data(), V.data()}, dO.data()};
  LayerStack stack(problem, implementation, device_, *space, options_.seed);
  stack.forward({&layer, 1});
  Pass pass;
  pass.O = device_.download(stack.output(0), problem.dtype, 0, q);
  const LayerStack::Gradients gradients = stack.backward({&layer, 1});
  device_.synchronize();
  const Dtype gradient_dtype = device_.gradient_dtype(problem);
  pass.dQ = device_.download(gradients.dQ.data(), gradient_dtype, 0, q);
  pass.dK = device_.download(gradients.dK.data(), gradient_dtype, 0, kv);
  pass.dV = device_.download(gradients.dV.data(), gradient_dtype, 0, kv);
  return pass;
}

}  // namespace flashbench
