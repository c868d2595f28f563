#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "flashbench/errors.hpp"
#include "flashbench/model.hpp"
#include "flashbench/units.hpp"

namespace flashbench {

namespace {

struct Moment {
  TagBytes live;  // [bytes]
  Phase phase;
};

}  // namespace

int64_t input_bytes(const Problem& problem) {
  const int64_t context = problem.self_attention() ? 0 : problem.kv_elements();  // C
  return (2 * problem.q_elements() + context) * element_bytes(problem.dtype);  // X0, dO (and C)
}

int64_t context_grad_bytes(const Problem& problem, const ModelParams& params) {
  return problem.self_attention() ? 0 : problem.kv_elements() * params.gradient_element_bytes;
}

LayerMemory layer_memory(const Problem& problem, Variant variant, const LayerCosts& costs, const ModelParams& params) {
  LayerMemory layer;
  layer.output_bytes = problem.q_elements() * element_bytes(problem.dtype);
  layer.kept_bytes = kept_bytes_per_layer(variant, problem);
  layer.held_bytes = layer.kept_bytes + (keeps_layer_output(variant) ? 0 : layer.output_bytes);
  layer.forward_workspace_bytes = costs.forward_workspace_bytes;
  layer.backward_workspace_bytes = costs.backward_workspace_bytes;
  layer.grad_bytes = problem.q_elements() * params.gradient_element_bytes + costs.backward_extra_grad_bytes;
  return layer;
}

// The stack's schedule for per-layer bytes `layer` of `problem` (on one device of a split sequence,
// the local problem).
ModelledMemory model_stack(const Problem& problem, Variant variant, const LayerMemory& layer,
                           const ModelParams& params) {
  const bool output_is_kept = keeps_layer_output(variant);
  const Tag output_tag = output_is_kept ? Tag::kept : Tag::activation;
  const int64_t kept_beyond_output = layer.kept_bytes - (output_is_kept ? layer.output_bytes : 0);
  const int64_t one_grad = problem.q_elements() * params.gradient_element_bytes;  // dX_{i+1} [bytes]
  const int64_t context_grad = context_grad_bytes(problem, params);  // dC, alive through backward [bytes]
  const int64_t L = problem.layers;

  TagBytes setup;
  setup[Tag::input] = params.input_sets * input_bytes(problem);
  setup[Tag::workspace] = params.persistent_workspace_bytes;

  // Candidate moments in the order they happen; the ledger keeps the first that reaches the peak.
  std::vector<Moment> moments;
  moments.reserve(static_cast<size_t>(L) + 1);

  // End of forward, last layer's workspace allocated: all L outputs and kept tensors are alive.
  Moment forward_end{setup, Phase::fwd};
  forward_end.live[output_tag] += L * layer.output_bytes;
  forward_end.live[Tag::kept] += L * kept_beyond_output;
  forward_end.live[Tag::workspace] += layer.forward_workspace_bytes;
  moments.push_back(forward_end);

  // Backward of layer i, its workspace allocated: layers 0..i still hold their kept tensors; of the
  // outputs, v2 still holds X_1..X_{i+1} (its O), the others X_1..X_i (X_{i+1} already freed);
  // dX_i and the extra gradients plus the incoming dX_{i+1}, which is a grad buffer for every layer
  // but the last (that one receives dO, an input).
  for (int64_t i = L - 1; i >= 0; --i) {
    Moment backward{setup, Phase::bwd};
    backward.live[Tag::kept] += (i + 1) * kept_beyond_output;
    backward.live[output_tag] += (output_is_kept ? i + 1 : i) * layer.output_bytes;
    backward.live[Tag::grad] = context_grad + layer.grad_bytes + (i < L - 1 ? one_grad : 0);
    backward.live[Tag::workspace] += layer.backward_workspace_bytes;
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

ModelledMemory model_memory(const Problem& problem, Variant variant, const LayerCosts& costs,
                            const ModelParams& params) {
  return model_stack(problem, variant, layer_memory(problem, variant, costs, params), params);
}

std::optional<std::string> does_not_fit(int64_t model_peak_bytes, int64_t limit_bytes) {
  if (model_peak_bytes <= limit_bytes) return std::nullopt;
  return fmt::format("needs {}, {} available", format_bytes(model_peak_bytes), format_bytes(limit_bytes));
}

namespace {

bool fits(const ModelSource& model, const Problem& problem, Variant variant, int64_t budget_bytes,
          int64_t* peak_bytes) {
  if (problem.rough_upper_bound_bytes() > kMaxProblemBytes) return false;
  const int64_t peak = model.stack(problem, variant).peak_bytes;
  if (peak_bytes) *peak_bytes = peak;
  return peak <= budget_bytes;
}

}  // namespace

FitResult fit_in_budget(const ModelSource& model, const Problem& problem, Variant variant, FitAxis axis,
                        int64_t budget_bytes, int64_t seq_step) {
  FitResult result;
  result.variant = variant;
  result.axis = axis;
  result.budget_bytes = budget_bytes;

  // The search runs over units of `step`: N = units · step.
  const int64_t step = axis == FitAxis::seq ? std::max<int64_t>(seq_step, 1) : 1;
  const int64_t unit_limit = (axis == FitAxis::seq ? kMaxSeq : kMaxBatchOrHeads) / step;
  auto with_size = [&](int64_t units) {
    Problem candidate = problem;
    (axis == FitAxis::seq ? candidate.seq : candidate.batch) = units * step;
    return candidate;
  };

  // Invariant: `low` fits (or is 0), `high + 1` does not fit (or is past the axis limit).
  int64_t low = 0;
  int64_t high = unit_limit;
  while (low < high) {
    const int64_t middle = low + (high - low + 1) / 2;
    if (fits(model, with_size(middle), variant, budget_bytes, nullptr))
      low = middle;
    else
      high = middle - 1;
  }
  result.max_value = low * step;
  result.at_axis_limit = low == unit_limit;
  if (low > 0) fits(model, with_size(low), variant, budget_bytes, &result.model_peak_bytes);
  return result;
}

}  // namespace flashbench
