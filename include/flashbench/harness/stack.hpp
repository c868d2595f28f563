#pragma once
// The chained layer stack, the same schedule on every device: X0 is the input,
// X_{i+1} = Attn(Q=X_i, K=X_i, V=X_i) per head, and backward feeds dX_i = dQ + dK + dV into layer
// i−1. Which buffer exists when, under which tag, is stated once here and reproduced in closed form
// by the model (model.hpp); change them together.
#include <vector>

#include "flashbench/harness/device.hpp"
#include "flashbench/harness/implementation.hpp"

namespace flashbench {

// What one layer of `variant` keeps, beyond its output, allocated exactly as kept_per_layer states
// (tag kept): the one place that allocates it.
KeptTensors allocate_kept(Variant variant, const Problem& problem, MemorySpace& space);

class LayerStack {
 public:
  LayerStack(const Problem& problem, Implementation& implementation, Device& device, MemorySpace& space);

  // Forward through problem.layers layers from X0 [B,H,N,d]: allocates each layer's output and what
  // its variant keeps. output() is X_L afterwards.
  void forward(const void* X0);
  const void* output() const;

  // Backward from dO down to dX_0 (returned, tag grad, the device's gradient dtype); frees what each
  // layer held as it goes.
  RawBuffer backward(const void* X0, const void* dO);

 private:
  const Problem& problem_;
  Implementation& implementation_;
  Device& device_;
  MemorySpace& space_;
  bool output_is_kept_;
  std::vector<RawBuffer> outputs_;  // outputs_[i] = X_{i+1}
  std::vector<KeptTensors> kept_;
};

}  // namespace flashbench
