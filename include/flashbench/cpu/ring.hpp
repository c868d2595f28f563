#pragma once
// v2 as ring attention (context parallelism) on the CPU's fp32 kernels: one rank's implementation
// of a layer, whose forward and backward meet the other ranks through a RingTransport
// (harness/ring.hpp). It follows the schedule the model states (model_context_parallel,
// docs/memory.md, docs/ring.md) buffer for buffer, so that a rank's ledger can be held against the
// model's per-device peak.
//
// Letters: the global problem has N rows; P ranks, rank r holding n = N/P of them (local_rows(),
// contiguous, or zig-zag when causal), BH = B·H heads, d the head dim. Each rank holds its n rows of
// Q, K, V and dO (G = H, N_k = N); what travels is a K block and a V block [BH, n, d] per step, and
// in backward beside them the fp32 partial sums dK and dV of those blocks.
//
//   forward  step s = 0..P-1 attends the local queries to the K, V blocks of rank r − s (its own at
//            s = 0), giving O_s and LSE_s for the rows that see any of its keys, merged into the
//            running O and LSE: LSE' = log(e^LSE + e^LSE_s), O' = e^(LSE−LSE')·O + e^(LSE_s−LSE')·O_s.
//   backward with the final O and LSE: P_ij = exp(S_ij − LSE_i) is the global softmax restricted to
//            the block and D_i = Σ_k dO_ik·O_ik the global row dot, so the single-device v2 backward
//            of the local queries against one block gives exactly that block's share: dQ_s (summed
//            over the steps into dQ) and dK_s, dV_s (added to the sums travelling with the block,
//            whose P-th send brings them home). The rank's results are dQ, dK and dV of its rows.
//
// fp32 storage, G = H, N_k = N, no dropout: make_ring_v2 refuses the rest
// (validate_context_parallel), unsupported() names 16-bit storage.
#include <memory>

#include "flashbench/cpu/attention.hpp"
#include "flashbench/harness/implementation.hpp"
#include "flashbench/harness/ring.hpp"

namespace flashbench::cpu {

// One kernel call of a ring step: local query rows [query_begin, +query_rows) against the block's
// rows [key_begin, +key_rows), both in the rank's storage order, causal (bottom-right aligned) or
// not.
struct RingStepCall {
  int64_t query_begin = 0;
  int64_t query_rows = 0;
  int64_t key_begin = 0;
  int64_t key_rows = 0;
  bool causal = false;
};
// The calls of one step: the rank's queries (global rows `queries`, in storage order) against a
// block holding global rows `keys`. all_heads: one call over every head at once (the whole block;
// the step has the local problem's workspace); otherwise each call runs head by head. Throws
// RuntimeFailure where the mask cuts a chunk in a way no call covers (chunks of unequal length).
struct RingStepPlan {
  bool all_heads = false;
  std::vector<RingStepCall> calls;
};
RingStepPlan plan_ring_step(const std::vector<RowRange>& queries, const std::vector<RowRange>& keys, bool causal);

// Rank transport.rank()'s implementation of v2 for `problem` (the whole problem: N rows) split over
// transport.ranks() ranks. Its layer calls receive the local problem (seq = N_k = N/P), as one device's
// layer stack runs it. Throws UsageError where validate_context_parallel does.
std::unique_ptr<Implementation> make_ring_v2(const Problem& problem, RingTransport& transport, Tiling tiling = {});

}  // namespace flashbench::cpu
