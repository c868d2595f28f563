#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "flashbench/cpu/storage16.hpp"
#include "flashbench/errors.hpp"
#include "flashbench/model.hpp"
#include "flashbench/report.hpp"

namespace flashbench {

namespace {

// Whether `variant` keeps its layer output itself (v2's O): then the output is tagged `kept`,
// counted once, and freed after that layer's backward instead of the next layer's.
bool keeps_layer_output(Variant variant, const Problem& problem) {
  for (const KeptTensor& tensor : kept_per_layer(variant, problem))
    if (tensor.name == "O") return true;
  return false;
}

struct Moment {
  TagBytes live;  // [bytes]
  Phase phase;
};

}  // namespace

int storage_element_bytes(const Problem& problem) { return element_bytes(problem.dtype); }

int64_t input_bytes(const Problem& problem) {
  return 2 * problem.qkv_elements() * storage_element_bytes(problem);  // X0 and dO
}

LayerMemory layer_memory(BackendKind, const Problem& problem, Variant variant,
                         const cpu::Tiling& tiling, int threads) {
  const cpu::LayerShape shape = cpu::LayerShape::of(problem);
  LayerMemory layer;
  layer.output_bytes = problem.qkv_elements() * storage_element_bytes(problem);
  layer.kept_bytes = kept_bytes_per_layer(variant, problem);
  layer.held_bytes = layer.kept_bytes + (keeps_layer_output(variant, problem) ? 0 : layer.output_bytes);
  // 16-bit storage adds fp32 staging and runs standard and v1 one head at a time (storage16.hpp).
  const auto workspace_elements = problem.dtype == Dtype::fp32 ? cpu::workspace_elements : cpu::workspace16_elements;
  layer.forward_workspace_bytes =
      workspace_elements(variant, cpu::Pass::forward, shape, tiling, threads) * kWorkspaceElementBytes;
  layer.backward_workspace_bytes =
      workspace_elements(variant, cpu::Pass::backward, shape, tiling, threads) * kWorkspaceElementBytes;
  layer.grad_bytes = 3 * problem.qkv_elements() * kGradElementBytes;
  return layer;
}

ModelledMemory model_memory(BackendKind kind, const Problem& problem, Variant variant,
                            const cpu::Tiling& tiling, int threads) {
  const LayerMemory layer = layer_memory(kind, problem, variant, tiling, threads);
  const bool output_is_kept = keeps_layer_output(variant, problem);
  const Tag output_tag = output_is_kept ? Tag::kept : Tag::activation;
  const int64_t kept_beyond_output = layer.kept_bytes - (output_is_kept ? layer.output_bytes : 0);
  const int64_t one_grad = layer.grad_bytes / 3;  // dX_{i+1} carried into layer i [bytes]
  const int64_t L = problem.layers;

  TagBytes setup;
  setup[Tag::input] = input_bytes(problem);

  // Candidate moments in the order they happen; the ledger keeps the first that reaches the peak.
  std::vector<Moment> moments;
  moments.reserve(static_cast<size_t>(L) + 1);

  // End of forward, last layer's workspace allocated: all L outputs and kept tensors are alive.
  Moment forward_end{setup, Phase::fwd};
  forward_end.live[output_tag] += L * layer.output_bytes;
  forward_end.live[Tag::kept] += L * kept_beyond_output;
  forward_end.live[Tag::workspace] = layer.forward_workspace_bytes;
  moments.push_back(forward_end);

  // Backward of layer i, its workspace allocated: layers 0..i still hold their kept tensors; of the
  // outputs, v2 still holds X_1..X_{i+1} (its O), the others X_1..X_i (X_{i+1} already freed);
  // dQ, dK, dV plus the incoming dX_{i+1}, which is a grad buffer for every layer but the last
  // (that one receives dO, an input).
  for (int64_t i = L - 1; i >= 0; --i) {
    Moment backward{setup, Phase::bwd};
    backward.live[Tag::kept] += (i + 1) * kept_beyond_output;
    backward.live[output_tag] += (output_is_kept ? i + 1 : i) * layer.output_bytes;
    backward.live[Tag::grad] = layer.grad_bytes + (i < L - 1 ? one_grad : 0);
    backward.live[Tag::workspace] = layer.backward_workspace_bytes;
    moments.push_back(backward);
  }

  const Moment* peak = &moments.front();
  for (const Moment& moment : moments)
    if (moment.live.total() > peak->live.total()) peak = &moment;

  ModelledMemory model;
  model.peak_bytes = peak->live.total();
  model.by_tag = peak->live;
  model.peak_phase = peak->phase;
  model.kept_bytes = L * layer.kept_bytes;
  return model;
}

std::optional<std::string> does_not_fit(int64_t model_peak_bytes, int64_t limit_bytes) {
  if (model_peak_bytes <= limit_bytes) return std::nullopt;
  return fmt::format("needs {}, {} available", format_bytes(model_peak_bytes), format_bytes(limit_bytes));
}

namespace {

// A conservative size of the largest term of any variant's peak, in double, so that the search
// never evaluates a problem whose byte counts would overflow int64. [bytes]
double rough_upper_bound_bytes(const Problem& p) {
  const double heads_total = double(p.batch) * double(p.heads);
  const double per_layer = heads_total * double(p.seq) * (double(p.seq) + double(p.head_dim) + 8.0) * 8.0;
  return per_layer * (double(p.layers) + 3.0);
}

bool fits(BackendKind kind, const Problem& problem, Variant variant, int64_t budget_bytes,
          const cpu::Tiling& tiling, int threads, int64_t* peak_bytes) {
  constexpr double kSafeBytes = 4.0e18;  // below int64's 9.2e18 with room for workspace terms
  if (rough_upper_bound_bytes(problem) > kSafeBytes) return false;
  const int64_t peak = model_memory(kind, problem, variant, tiling, threads).peak_bytes;
  if (peak_bytes) *peak_bytes = peak;
  return peak <= budget_bytes;
}

}  // namespace

FitResult fit_in_budget(BackendKind kind, const Problem& problem, Variant variant, FitAxis axis,
                        int64_t budget_bytes, const cpu::Tiling& tiling, int threads) {
  FitResult result;
  result.variant = variant;
  result.axis = axis;
  result.budget_bytes = budget_bytes;

  const int64_t axis_limit = axis == FitAxis::seq ? kMaxSeq : kMaxBatchOrHeads;
  auto with_size = [&](int64_t size) {
    Problem candidate = problem;
    (axis == FitAxis::seq ? candidate.seq : candidate.batch) = size;
    return candidate;
  };

  // Invariant: `low` fits (or is 0), `high + 1` does not fit (or is past the axis limit).
  int64_t low = 0;
  int64_t high = axis_limit;
  while (low < high) {
    const int64_t middle = low + (high - low + 1) / 2;
    if (fits(kind, with_size(middle), variant, budget_bytes, tiling, threads, nullptr))
      low = middle;
    else
      high = middle - 1;
  }
  result.max_value = low;
  result.at_axis_limit = low == axis_limit;
  if (low > 0) fits(kind, with_size(low), variant, budget_bytes, tiling, threads, &result.model_peak_bytes);
  return result;
}

}  // namespace flashbench
