#pragma once
// An implementation: one way of computing a layer's forward and backward on one device, for one
// variant — `standard`, `v2`, a kept earlier revision (`v2.split`), or a peer's kernel (`cudnn`).
// It states nothing about what it keeps: the variant's statement (variant.hpp) is the one
// declaration, and the layer stack (stack.hpp) allocates exactly that before forward is called.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashbench/core/memory.hpp"
#include "flashbench/core/problem.hpp"
#include "flashbench/core/result.hpp"
#include "flashbench/core/variant.hpp"
#include "flashbench/model/model.hpp"

namespace flashbench {

class Device;

// What one layer keeps between its forward and its backward (tag `kept`), by the names of
// kept_per_layer: "P", "S", "m", "l", "LSE". ("O", the layer output, is the stack's.)
class KeptTensors {
 public:
  void add(std::string_view name, RawBuffer buffer);
  // The tensor called `name`; a name the variant does not keep is a programming error (throws).
  void* operator[](std::string_view name) const;
  template <class T>
  T* get(std::string_view name) const { return static_cast<T*>((*this)[name]); }
  void clear() { tensors_.clear(); }

 private:
  struct Named {
    std::string_view name;
    RawBuffer buffer;
  };
  std::vector<Named> tensors_;
};

// One layer's attention inputs, in the storage dtype: Q [B,H,N,d] and K, V [B,G,N_k,d], drawn
// independently (query head h reads K/V head h / r, r = H/G).
struct LayerInputs {
  const void* Q;
  const void* K;
  const void* V;
};

// One layer's gradients, in the device's gradient dtype (Device::gradient_dtype): dQ [B,H,N,d] and
// dK, dV [B,G,N_k,d], each K/V head's summed over the r query heads that read it. Backward writes
// them (it never adds to what they held).
struct LayerGradients {
  void* dQ;
  void* dK;
  void* dV;
};

// One layer call.
struct LayerCall {
  const Problem& problem;
  Device& device;      // the device the implementation was registered for
  MemorySpace& space;  // where its workspace comes from (tag workspace; grad for extra gradients)
  // The dropout mask's key (philox.hpp): the stack's seed, and the layer as its offset, the same in
  // this layer's forward and backward.
  uint64_t dropout_seed = 0;
  int64_t layer = 0;
};

class Implementation {
 public:
  virtual ~Implementation() = default;
  virtual std::string_view name() const = 0;  // unique on its device: "v2", "v2.split"
  virtual Variant variant() const = 0;
  virtual std::string_view summary() const = 0;  // one line for `info`
  // Why this implementation cannot run `problem` (→ a skipped row), or nothing.
  virtual std::optional<std::string> unsupported(const Problem& problem) const;
  // What it allocates per layer beyond the variant's statement, for the model and the pre-flight.
  virtual LayerCosts costs(const Problem& problem, const ModelParams& params) const = 0;
  // What its rows record of it (tile sizes).
  virtual void annotate(Row& row) const;
  // Whether its code is not flashbench's (a plugin, plugins.hpp): what it allocates past the ledger
  // is then unknown, and the runner holds the outside view of its memory against the ledger's peak.
  virtual bool foreign() const { return false; }

  // O [B,H,N,d] = attention(Q, K, V) in the storage dtype, filling the kept tensors the stack
  // allocated.
  virtual void forward(LayerCall& call, const LayerInputs& in, void* O, KeptTensors& kept) = 0;
  // dQ, dK, dV from dO [B,H,N,d] (the storage dtype) and what forward kept; O is read by v2 only.
  virtual void backward(LayerCall& call, const LayerInputs& in, const void* O, const void* dO, KeptTensors& kept,
                        const LayerGradients& gradients) = 0;
};

}  // namespace flashbench
