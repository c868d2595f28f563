#include "flashbench/cpu/stack.hpp"

#include <chrono>

namespace flashbench::cpu {

namespace {
double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

StackPass run_stack(Variant variant, const Problem& problem, const Tiling& tiling, const float* X0,
                    const float* dO, HostAllocator& allocator, bool capture) {
  const LayerShape shape = LayerShape::of(problem);
  const int64_t L = problem.layers, elements = problem.qkv_elements();
  MemoryLedger& ledger = allocator.ledger();
  StackPass pass;

  // outputs[i] is X_{i+1}, the output of layer i. v2 keeps it as its O; for the others it is an
  // activation, alive only because layer i+1 keeps its input.
  const Tag output_tag = backward_reads_output(variant) ? Tag::kept : Tag::activation;
  std::vector<HostBuffer<float>> outputs(L);
  std::vector<KeptState> kept(L);

  ledger.set_phase(Phase::fwd);
  const auto fwd_start = std::chrono::steady_clock::now();
  const float* X = X0;
  for (int64_t i = 0; i < L; ++i) {
    outputs[i] = HostBuffer<float>(allocator, output_tag, elements);
    forward(variant, shape, tiling, X, X, X, outputs[i].data(), kept[i], allocator);
    X = outputs[i].data();
  }
  pass.fwd_ms = milliseconds_since(fwd_start);
  pass.kept_bytes = ledger.live()[Tag::kept];
  if (capture) pass.output.assign(X, X + elements);

  ledger.set_phase(Phase::bwd);
  const auto bwd_start = std::chrono::steady_clock::now();
  if (!backward_reads_output(variant)) outputs[L - 1].reset();  // nothing reads the last output
  HostBuffer<float> incoming;  // dX_{i+1}; empty means dO
  for (int64_t i = L - 1; i >= 0; --i) {
    const float* X_i = i == 0 ? X0 : outputs[i - 1].data();
    const float* gradient = incoming.empty() ? dO : incoming.data();
    HostBuffer<float> dQ(allocator, Tag::grad, elements);
    HostBuffer<float> dK(allocator, Tag::grad, elements);
    HostBuffer<float> dV(allocator, Tag::grad, elements);
    backward(variant, shape, tiling, X_i, X_i, X_i, outputs[i].data(), gradient, kept[i], dQ.data(), dK.data(),
             dV.data(), allocator);
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

}  // namespace flashbench::cpu
