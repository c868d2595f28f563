#include "flashbench/harness/stack.hpp"

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/timeline.hpp"

namespace flashbench {

void KeptTensors::add(std::string_view name, RawBuffer buffer) { tensors_.push_back({name, std::move(buffer)}); }

void* KeptTensors::operator[](std::string_view name) const {
  for (const Named& tensor : tensors_)
    if (tensor.name == name) return tensor.buffer.data();
  throw RuntimeFailure(fmt::format("internal error: no kept tensor '{}'", name));
}

std::optional<std::string> Implementation::unsupported(const Problem&) const { return std::nullopt; }
void Implementation::annotate(Row&) const {}

KeptTensors allocate_kept(Variant variant, const Problem& problem, MemorySpace& space) {
  KeptTensors kept;
  for (const KeptTensor& tensor : kept_per_layer(variant, problem))
    if (tensor.name != "O") kept.add(tensor.name, RawBuffer(space, Tag::kept, tensor.bytes()));  // O: the output
  return kept;
}

LayerStack::LayerStack(const Problem& problem, Implementation& implementation, Device& device, MemorySpace& space,
                       uint64_t dropout_seed)
    : problem_(problem), implementation_(implementation), device_(device), space_(space),
      output_is_kept_(keeps_layer_output(implementation.variant())), dropout_seed_(dropout_seed) {}

namespace {
void require_layers(const Problem& problem, std::span<const LayerData> layers) {
  if (int64_t(layers.size()) != problem.layers)
    throw RuntimeFailure(fmt::format("internal error: {} layers' data for a stack of {}", layers.size(), problem.layers));
}
}  // namespace

void LayerStack::forward(std::span<const LayerData> layers) {
  require_layers(problem_, layers);
  const int64_t L = problem_.layers;
  const int64_t o_bytes = problem_.q_elements() * element_bytes(problem_.dtype);
  outputs_.clear();
  kept_.clear();
  outputs_.resize(L);
  kept_.resize(L);
  LayerCall call{problem_, device_, space_};
  call.dropout_seed = dropout_seed_;
  for (int64_t i = 0; i < L; ++i) {
    call.layer = i;
    const ScopedSpan span(space_.ledger().timeline(), "forward", i);
    const DeviceRange range(device_, range_name(i, "forward"));
    outputs_[i] = RawBuffer(space_, output_is_kept_ ? Tag::kept : Tag::activation, o_bytes);
    kept_[i] = allocate_kept(implementation_.variant(), problem_, space_);
    implementation_.forward(call, layers[i].in, outputs_[i].data(), kept_[i]);
  }
}

std::string LayerStack::range_name(int64_t i, std::string_view phase) const {
  return range_prefix_.empty() ? std::string() : fmt::format("{} layer {} {}", range_prefix_, i, phase);
}

const void* LayerStack::output(int64_t layer) const { return outputs_.at(size_t(layer)).data(); }

LayerStack::Gradients LayerStack::backward(std::span<const LayerData> layers) {
  require_layers(problem_, layers);
  const int64_t L = problem_.layers;
  const int64_t element = element_bytes(device_.gradient_dtype(problem_));
  LayerCall call{problem_, device_, space_};
  call.dropout_seed = dropout_seed_;
  Gradients gradients;
  for (int64_t i = L - 1; i >= 0; --i) {
    const ScopedSpan span(space_.ledger().timeline(), "backward", i);
    const DeviceRange range(device_, range_name(i, "backward"));
    // Layer i+1's gradients went to what lies below it as its backward returned.
    gradients = {};
    gradients.dQ = RawBuffer(space_, Tag::grad, problem_.q_elements() * element);
    gradients.dK = RawBuffer(space_, Tag::grad, problem_.kv_elements() * element);
    gradients.dV = RawBuffer(space_, Tag::grad, problem_.kv_elements() * element);
    call.layer = i;
    implementation_.backward(call, layers[i].in, outputs_[i].data(), layers[i].dO, kept_[i],
                             {gradients.dQ.data(), gradients.dK.data(), gradients.dV.data()});
    kept_[i].clear();
    outputs_[i].reset();
  }
  return gradients;
}

}  // namespace flashbench
