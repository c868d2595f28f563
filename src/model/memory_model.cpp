#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {

namespace {

struct Moment {
  TagBytes live;  // [bytes]
  Phase phase;
};

}  // namespace

int64_t input_bytes(const Problem& problem) {
  // Q_i, K_i, V_i and dO_i of each of the L layers.
  const int64_t per_layer = 2 * problem.q_elements() + 2 * problem.kv_elements();
  return problem.layers * per_layer * element_bytes(problem.dtype);
}

int64_t saved_input_bytes_per_layer(const Problem& problem) {
  return (problem.q_elements() + 2 * problem.kv_elements()) * element_bytes(problem.dtype);
}

LayerMemory layer_memory(const Problem& problem, Variant variant, const LayerCosts& costs, const ModelParams& params) {
  LayerMemory layer;
  layer.output_bytes = problem.q_elements() * element_bytes(problem.dtype);
  layer.kept_bytes = kept_bytes_per_layer(variant, problem);
  layer.held_bytes = layer.kept_bytes + (keeps_layer_output(variant) ? 0 : layer.output_bytes);
  layer.forward_workspace_bytes = costs.forward_workspace_bytes;
  layer.backward_workspace_bytes = costs.backward_workspace_bytes;
  layer.grad_bytes = (problem.q_elements() + 2 * problem.kv_elements()) * params.gradient_element_bytes +
                     costs.backward_extra_grad_bytes;
  return layer;
}

ModelledMemory model_stack(const Problem& problem, Variant variant, const LayerMemory& layer,
                           const ModelParams& params) {
  const bool output_is_kept = keeps_layer_output(variant);
  const Tag output_tag = output_is_kept ? Tag::kept : Tag::activation;
  const int64_t kept_beyond_output = layer.kept_bytes - (output_is_kept ? layer.output_bytes : 0);
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

  // Backward of layer i, its workspace allocated: layers 0..i still hold their outputs and kept
  // tensors; its own dQ, dK, dV and extra gradients are live (layer i+1's were freed before them).
  for (int64_t i = L - 1; i >= 0; --i) {
    Moment backward{setup, Phase::bwd};
    backward.live[Tag::kept] += (i + 1) * kept_beyond_output;
    backward.live[output_tag] += (i + 1) * layer.output_bytes;
    backward.live[Tag::grad] = layer.grad_bytes;
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
