#pragma once
// The chained layer stack, the same schedule on every device: X0 is the input,
// X_{i+1} = Attn(Q=X_i, K=X_i, V=X_i) per head, and backward feeds dX_i = dQ + dK + dV into layer
// i−1. Where K and V cannot be X (G < H or N_k ≠ N, problem.hpp) every layer reads the one context
// C instead, X_{i+1} = Attn(Q=X_i, K=C, V=C), dX_i = dQ, and dC = Σ_i (dK_i + dV_i) is allocated
// (tag grad) when backward starts. Which buffer exists when, under which tag, is stated once here and
// reproduced in closed form by the model (model.hpp); change them together.
#include <string>
#include <string_view>
#include <vector>

#include "flashbench/harness/device.hpp"
#include "flashbench/harness/implementation.hpp"

namespace flashbench {

// What one layer of `variant` keeps, beyond its output, allocated exactly as kept_per_layer states
// (tag kept): the one place that allocates it.
KeptTensors allocate_kept(Variant variant, const Problem& problem, MemorySpace& space);

class LayerStack {
 public:
  // `dropout_seed` keys the layers' dropout masks (the layer index is the offset).
  LayerStack(const Problem& problem, Implementation& implementation, Device& device, MemorySpace& space,
             uint64_t dropout_seed = 0);

  // Forward through problem.layers layers from X0 [B,H,N,d] (and the context C [B,G,N_k,d] where
  // the problem has one): allocates each layer's output and what its variant keeps. output() is X_L
  // afterwards.
  void forward(const void* X0, const void* C = nullptr);
  const void* output() const;

  // Backward from dO down to dX_0 and dC (tag grad, the device's gradient dtype); frees what each
  // layer held as it goes.
  struct Gradients {
    RawBuffer input;    // dX_0 [B,H,N,d]
    RawBuffer context;  // dC [B,G,N_k,d]; empty for self-attention
  };
  Gradients backward(const void* X0, const void* dO, const void* C = nullptr);

  // Names each layer's forward and backward as a device range, "<prefix> layer <i> forward" (for a
  // profiler: `run --profile`); an empty prefix (the default) names none.
  void name_ranges(std::string prefix) { range_prefix_ = std::move(prefix); }

 private:
  // The range of layer i's `phase`, or an empty name when ranges are off.
  std::string range_name(int64_t i, std::string_view phase) const;

  const Problem& problem_;
  Implementation& implementation_;
  Device& device_;
  MemorySpace& space_;
  bool output_is_kept_;
  uint64_t dropout_seed_;
  std::vector<RawBuffer> outputs_;  // outputs_[i] = X_{i+1}
  std::vector<KeptTensors> kept_;
  std::string range_prefix_;
};

}  // namespace flashbench
