#include "flashbench/harness/stack.hpp"

#include <fmt/format.h>

#include "flashbench/errors.hpp"
#include "flashbench/timeline.hpp"

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
void require_context(const Problem& problem, const void* C) {
  if ((C != nullptr) == !problem.self_attention()) return;
  throw RuntimeFailure(problem.self_attention() ? "internal error: a context for a self-attention stack"
                                                : "internal error: no context for a stack that attends to one");
}
}  // namespace

void LayerStack::forward(const void* X0, const void* C) {
  require_context(problem_, C);
  const int64_t L = problem_.layers;
  const int64_t x_bytes = problem_.q_elements() * element_bytes(problem_.dtype);
  outputs_.clear();
  kept_.clear();
  outputs_.resize(L);
  kept_.resize(L);
  LayerCall call{problem_, device_, space_, C};
  call.dropout_seed = dropout_seed_;
  const void* X = X0;
  for (int64_t i = 0; i < L; ++i) {
    call.layer = i;
    const ScopedSpan span(space_.ledger().timeline(), "forward", i);
    const DeviceRange range(device_, range_name(i, "forward"));
    outputs_[i] = RawBuffer(space_, output_is_kept_ ? Tag::kept : Tag::activation, x_bytes);
    kept_[i] = allocate_kept(implementation_.variant(), problem_, space_);
    implementation_.forward(call, X, outputs_[i].data(), kept_[i]);
    X = outputs_[i].data();
  }
}

std::string LayerStack::range_name(int64_t i, std::string_view phase) const {
  return range_prefix_.empty() ? std::string() : fmt::format("{} layer {} {}", range_prefix_, i, phase);
}

const void* LayerStack::output() const { return outputs_.back().data(); }

LayerStack::Gradients LayerStack::backward(const void* X0, const void* dO, const void* C) {
  require_context(problem_, C);
  const int64_t L = problem_.layers;
  const Dtype gradient_dtype = device_.gradient_dtype(problem_);
  const int64_t grad_bytes = problem_.q_elements() * element_bytes(gradient_dtype);
  Gradients gradients;
  if (C) gradients.context = RawBuffer(space_, Tag::grad, problem_.kv_elements() * element_bytes(gradient_dtype));
  LayerCall call{problem_, device_, space_, C, gradients.context.data()};
  call.dropout_seed = dropout_seed_;
  if (!output_is_kept_) outputs_[L - 1].reset();  // nothing reads the last output
  RawBuffer incoming;  // dX_{i+1}; empty means dO
  for (int64_t i = L - 1; i >= 0; --i) {
    const ScopedSpan span(space_.ledger().timeline(), "backward", i);
    const DeviceRange range(device_, range_name(i, "backward"));
    const void* X_i = i == 0 ? X0 : outputs_[i - 1].data();
    const Gradient gradient = incoming.empty() ? Gradient{dO, problem_.dtype} : Gradient{incoming.data(), gradient_dtype};
    RawBuffer dX(space_, Tag::grad, grad_bytes);
    call.first_context_grad = i == L - 1;
    call.layer = i;
    implementation_.backward(call, X_i, outputs_[i].data(), gradient, kept_[i], dX.data());
    kept_[i].clear();
    if (output_is_kept_) {
      outputs_[i].reset();
    } else if (i >= 1) {
      outputs_[i - 1].reset();  // X_i: layer i was its last reader
    }
    incoming = std::move(dX);
  }
  gradients.input = std::move(incoming);
  return gradients;
}

}  // namespace flashbench
