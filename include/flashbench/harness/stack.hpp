#pragma once
// The layer stack, the same schedule on every device, as a training step schedules its attention
// layers: L independent layers, attention(Q_i, K_i, V_i) each, all forwards (each layer's output O_i
// and what its variant keeps alive until its backward), then the backwards in reverse, each writing
// dQ_i, dK_i, dV_i (tag grad, the device's gradient dtype). A layer's inputs and dO are the caller's
// (tag input). Layer i's gradients are handed to what lies below it (a projection's backward,
// outside the benchmark) and freed as its backward returns; layer 0's are the stack's result. Which buffer exists when, under which tag, is stated once here and reproduced in closed
// form by the model (model.hpp); change them together.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashbench/harness/device.hpp"
#include "flashbench/harness/implementation.hpp"

namespace flashbench {

// What one layer of `variant` keeps, beyond its output, allocated exactly as kept_per_layer states
// (tag kept): the one place that allocates it.
KeptTensors allocate_kept(Variant variant, const Problem& problem, MemorySpace& space);

// One layer's data on the device: its inputs and the gradient dO [B,H,N,d] of its output (storage
// dtype).
struct LayerData {
  LayerInputs in;
  const void* dO;
};

class LayerStack {
 public:
  // `dropout_seed` keys the layers' dropout masks (the layer index is the offset).
  LayerStack(const Problem& problem, Implementation& implementation, Device& device, MemorySpace& space,
             uint64_t dropout_seed = 0);

  // Forward through the problem.layers layers (`layers` holds one entry per layer): allocates each
  // layer's output O_i (tag kept for v2, whose kept O it is; activation otherwise) and what its
  // variant keeps.
  void forward(std::span<const LayerData> layers);
  const void* output(int64_t layer) const;  // O_i after forward, until layer i's backward

  // Backward from layer L-1 down to 0; frees what each layer held as it goes. Layer 0's gradients.
  struct Gradients {
    RawBuffer dQ;  // [B,H,N,d]
    RawBuffer dK;  // [B,G,N_k,d]
    RawBuffer dV;  // [B,G,N_k,d]
  };
  Gradients backward(std::span<const LayerData> layers);

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
  std::vector<RawBuffer> outputs_;  // outputs_[i] = O_i
  std::vector<KeptTensors> kept_;
  std::string range_prefix_;
};

}  // namespace flashbench
