#pragma once
// The chained layer stack on the CPU: X0 is the input, X_{i+1} = Attn(Q=X_i, K=X_i, V=X_i) per head,
// and backward feeds dX_i = dQ + dK + dV into layer i−1. Every layer keeps its input and what its
// variant keeps until its own backward is done (DESIGN.md, "Problem axes"). Inputs, activations and
// kept tensors are stored in the problem's dtype (fp32, or bf16/fp16 through cpu/storage16.hpp);
// gradients and arithmetic are fp32.
#include <vector>

#include "flashbench/cpu/attention.hpp"
#include "flashbench/cpu/storage16.hpp"
#include "flashbench/memory.hpp"
#include "flashbench/problem.hpp"
#include "flashbench/variant.hpp"

namespace flashbench::cpu {

// X0 and dO [B,H,N,d] as tracked `input` buffers in the problem's storage dtype.
struct StackInputs {
  HostBuffer<float> X0, dO;       // fp32 storage
  HostBuffer<Half> X0_16, dO_16;  // bf16 / fp16 storage
};
StackInputs make_stack_inputs(const Problem& problem, const std::vector<float>& X0, const std::vector<float>& dO,
                              HostAllocator& allocator);

struct StackPass {
  double fwd_ms = 0;          // [ms]
  double bwd_ms = 0;          // [ms]
  int64_t kept_bytes = 0;     // live `kept` bytes at the end of forward [bytes]
  std::vector<float> output;      // X_L [B,H,N,d], when captured
  std::vector<float> input_grad;  // dX_0 [B,H,N,d], when captured
};

// One forward and backward of the whole stack; the ledger's phase is set to fwd, then bwd.
// With `capture`, copies X_L and dX_0 out as fp32 (untracked).
StackPass run_stack(Variant variant, const Problem& problem, const Tiling& tiling, const StackInputs& inputs,
                    HostAllocator& allocator, bool capture);

}  // namespace flashbench::cpu
