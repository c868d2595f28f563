#pragma once
// The chained layer stack on the CPU: X0 is the input, X_{i+1} = Attn(Q=X_i, K=X_i, V=X_i) per head,
// and backward feeds dX_i = dQ + dK + dV into layer i−1. Every layer keeps its input and what its
// variant keeps until its own backward is done (DESIGN.md, "Problem axes").
#include <vector>

#include "flashbench/cpu/attention.hpp"
#include "flashbench/memory.hpp"
#include "flashbench/problem.hpp"
#include "flashbench/variant.hpp"

namespace flashbench::cpu {

struct StackPass {
  double fwd_ms = 0;          // [ms]
  double bwd_ms = 0;          // [ms]
  int64_t kept_bytes = 0;     // live `kept` bytes at the end of forward [bytes]
  std::vector<float> output;      // X_L [B,H,N,d], when captured
  std::vector<float> input_grad;  // dX_0 [B,H,N,d], when captured
};

// One forward and backward of the whole stack. X0 and dO are tracked `input` buffers [B,H,N,d];
// the ledger's phase is set to fwd, then bwd. With `capture`, copies X_L and dX_0 out (untracked).
StackPass run_stack(Variant variant, const Problem& problem, const Tiling& tiling, const float* X0,
                    const float* dO, HostAllocator& allocator, bool capture);

}  // namespace flashbench::cpu
