#include "flashbench/cpu/stack.hpp"

#include <algorithm>
#include <chrono>

namespace flashbench::cpu {

namespace {

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The two ways of storing the stack's tensors: how a layer runs on them and how they read back.
struct Fp32Storage {
  using Element = float;
  using Kept = KeptState;
  void forward(Variant v, const LayerShape& s, const Tiling& t, const float* X, float* O, Kept& kept,
               HostAllocator& allocator) const {
    cpu::forward(v, s, t, X, X, X, O, kept, allocator);
  }
  void backward(Variant v, const LayerShape& s, const Tiling& t, const float* X, const float* O,
                const float* dO_stored, const float* dO_float, Kept& kept, float* dQ, float* dK, float* dV,
                HostAllocator& allocator) const {
    cpu::backward(v, s, t, X, X, X, O, dO_stored ? dO_stored : dO_float, kept, dQ, dK, dV, allocator);
  }
  std::vector<float> read(const float* x, int64_t count) const { return {x, x + count}; }
};

struct HalfStorage {
  using Element = Half;
  using Kept = KeptState16;
  Dtype dtype;
  void forward(Variant v, const LayerShape& s, const Tiling& t, const Half* X, Half* O, Kept& kept,
               HostAllocator& allocator) const {
    forward16(v, dtype, s, t, X, O, kept, allocator);
  }
  void backward(Variant v, const LayerShape& s, const Tiling& t, const Half* X, const Half* O, const Half* dO_stored,
                const float* dO_float, Kept& kept, float* dQ, float* dK, float* dV, HostAllocator& allocator) const {
    backward16(v, dtype, s, t, X, O, dO_stored, dO_float, kept, dQ, dK, dV, allocator);
  }
  std::vector<float> read(const Half* x, int64_t count) const {
    std::vector<float> out(count);
    widen_from_storage(dtype, x, out.data(), count);
    return out;
  }
};

template <class Storage>
StackPass run_layers(const Storage& storage, Variant variant, const Problem& problem, const Tiling& tiling,
                     const typename Storage::Element* X0, const typename Storage::Element* dO,
                     HostAllocator& allocator, bool capture) {
  using Element = typename Storage::Element;
  const LayerShape shape = LayerShape::of(problem);
  const int64_t L = problem.layers, elements = problem.qkv_elements();
  MemoryLedger& ledger = allocator.ledger();
  StackPass pass;

  // outputs[i] is X_{i+1}, the output of layer i. v2 keeps it as its O; for the others it is an
  // activation, alive only because layer i+1 keeps its input.
  const Tag output_tag = backward_reads_output(variant) ? Tag::kept : Tag::activation;
  std::vector<HostBuffer<Element>> outputs(L);
  std::vector<typename Storage::Kept> kept(L);

  ledger.set_phase(Phase::fwd);
  const auto fwd_start = std::chrono::steady_clock::now();
  const Element* X = X0;
  for (int64_t i = 0; i < L; ++i) {
    outputs[i] = HostBuffer<Element>(allocator, output_tag, elements);
    storage.forward(variant, shape, tiling, X, outputs[i].data(), kept[i], allocator);
    X = outputs[i].data();
  }
  pass.fwd_ms = milliseconds_since(fwd_start);
  pass.kept_bytes = ledger.live()[Tag::kept];
  if (capture) pass.output = storage.read(X, elements);

  ledger.set_phase(Phase::bwd);
  const auto bwd_start = std::chrono::steady_clock::now();
  if (!backward_reads_output(variant)) outputs[L - 1].reset();  // nothing reads the last output
  HostBuffer<float> incoming;  // dX_{i+1}, fp32; empty means dO
  for (int64_t i = L - 1; i >= 0; --i) {
    const Element* X_i = i == 0 ? X0 : outputs[i - 1].data();
    HostBuffer<float> dQ(allocator, Tag::grad, elements);
    HostBuffer<float> dK(allocator, Tag::grad, elements);
    HostBuffer<float> dV(allocator, Tag::grad, elements);
    storage.backward(variant, shape, tiling, X_i, outputs[i].data(), incoming.empty() ? dO : nullptr,
                     incoming.data(), kept[i], dQ.data(), dK.data(), dV.data(), allocator);
    if (backward_reads_output(variant)) {
      outputs[i].reset();
    } else if (i >= 1) {
      outputs[i - 1].reset();  // X_i: layer i was its last reader
    }
    // Q, K and V are all X_i, so dX_i = dQ + dK + dV.
    float* dX = dQ.data();
    const float* dK_data = dK.data();
    const float* dV_data = dV.data();
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < elements; ++e) dX[e] += dK_data[e] + dV_data[e];
    dK.reset();
    dV.reset();
    incoming = std::move(dQ);
  }
  pass.bwd_ms = milliseconds_since(bwd_start);
  if (capture) pass.input_grad.assign(incoming.data(), incoming.data() + elements);
  return pass;
}

}  // namespace

StackInputs make_stack_inputs(const Problem& problem, const std::vector<float>& X0, const std::vector<float>& dO,
                              HostAllocator& allocator) {
  const int64_t elements = problem.qkv_elements();
  StackInputs inputs;
  if (problem.dtype == Dtype::fp32) {
    inputs.X0 = HostBuffer<float>(allocator, Tag::input, elements);
    inputs.dO = HostBuffer<float>(allocator, Tag::input, elements);
    std::copy_n(X0.data(), elements, inputs.X0.data());
    std::copy_n(dO.data(), elements, inputs.dO.data());
  } else {
    inputs.X0_16 = HostBuffer<Half>(allocator, Tag::input, elements);
    inputs.dO_16 = HostBuffer<Half>(allocator, Tag::input, elements);
    round_to_storage(problem.dtype, X0.data(), inputs.X0_16.data(), elements);
    round_to_storage(problem.dtype, dO.data(), inputs.dO_16.data(), elements);
  }
  return inputs;
}

StackPass run_stack(Variant variant, const Problem& problem, const Tiling& tiling, const StackInputs& inputs,
                    HostAllocator& allocator, bool capture) {
  if (problem.dtype == Dtype::fp32)
    return run_layers(Fp32Storage{}, variant, problem, tiling, inputs.X0.data(), inputs.dO.data(), allocator, capture);
  return run_layers(HalfStorage{problem.dtype}, variant, problem, tiling, inputs.X0_16.data(), inputs.dO_16.data(),
                    allocator, capture);
}

}  // namespace flashbench::cpu
