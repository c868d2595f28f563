#pragma once
// The one float64 reference: attention forward and backward as plain loops straight from the
// formulas, sharing no code with any kernel. Per query head h, with N query rows and N_k key rows of
// d features (K, V those of its K/V head; the causal mask bottom-right aligned, row i seeing columns
// j ≤ i + N_k − N, a fully masked row giving O = 0):
//   forward   S = scale·Q·Kᵀ, P = softmax(S) row-wise (masked entries 0), O = P·V
//   backward  dV = Pᵀ·dO, dP = dO·Vᵀ, D_i = Σ_j P_ij·dP_ij, dS = P ∘ (dP − D),
//             dQ = scale·dS·K, dK = scale·dSᵀ·Q
// With `emulate` set to a storage dtype it is the same computation done naively in that precision
// (as a framework without fused kernels does it): sums accumulate in fp32, as matrix products and
// reductions do, and every tensor the standard variant stores — S, P, O, dP, dS, and dX after each
// of its three accumulations — is rounded to the dtype. Its error against the exact run is the bar
// an implementation is judged by (FlashAttention's: a small multiple of it; runner.cpp).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "flashbench/problem.hpp"

namespace flashbench {

struct ReferenceShape {
  int64_t heads;     // query heads computed (the stack's heads are independent of each other)
  int64_t seq;       // N
  int64_t head_dim;  // d
  bool causal;
  int64_t keys = 0;        // N_k; 0: N
  int64_t group_size = 1;  // r: query heads k·r … k·r + r − 1 read K/V head k (reference_layer)
  // Dropout: P̃ = P ∘ Z/(1 − p), O = P̃·V, with the mask Z of philox.hpp keyed by dropout_seed and the
  // layer as offset (dropout_offset for reference_layer); the computed heads' flattened indices in
  // the whole problem are head_index (empty: 0, 1, …), since the mask's element index counts them.
  double dropout = 0;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
  std::vector<int64_t> head_index = {};
  int64_t key_rows() const { return keys > 0 ? keys : seq; }
};

// One layer, Q, dO [heads, N, d], K, V [heads/r, N_k, d]: O and the gradients of sum(O ∘ dO), dK
// and dV summed over the query heads that read each K/V head.
struct LayerReference {
  std::vector<double> O, dQ, dK, dV;
  double max_abs_score = 0;  // the largest |S_ij| seen
};
LayerReference reference_layer(const ReferenceShape& shape, std::span<const double> Q, std::span<const double> K,
                               std::span<const double> V, std::span<const double> dO,
                               std::optional<Dtype> emulate = std::nullopt);

// The chained self-attention stack of `layers` layers (N_k = N) with Q = K = V = X_i and
// dX_i = dQ + dK + dV: X_L and dX_0.
struct StackReference {
  std::vector<double> output, input_grad;
  double max_abs_score = 0;  // the largest |S_ij| of any layer
};
StackReference reference_stack(const ReferenceShape& shape, int64_t layers, std::span<const double> X0,
                               std::span<const double> dO, std::optional<Dtype> emulate = std::nullopt);

// The stack attending to a shared context (problem.hpp): Q = X_i [heads, N, d], K = V = C, where
// query head h reads C's head context_head[h] (C [any, N_k, d]); dX_i = dQ_i and
// dC = Σ_i (dK_i + dV_i) over the layers and the query heads given. X_L, dX_0 and dC (C's shape).
struct CrossStackReference {
  std::vector<double> output, input_grad, context_grad;
  double max_abs_score = 0;
};
CrossStackReference reference_cross_stack(const ReferenceShape& shape, int64_t layers, std::span<const double> X0,
                                          std::span<const double> dO, std::span<const double> C,
                                          std::span<const int64_t> context_head,
                                          std::optional<Dtype> emulate = std::nullopt);

// Rows `rows` of one layer's output O for one head, Q [N, d] and K = V = KV [N_k, d]:
// [rows.size(), d]. Costs O(rows·N_k·d), where the whole layer costs O(N·N_k·d).
std::vector<double> reference_output_rows(const ReferenceShape& shape, std::span<const double> Q,
                                          std::span<const double> KV, std::span<const int64_t> rows,
                                          std::optional<Dtype> emulate, double* max_abs_score);

// FLOP of reference_stack on `heads` heads, exact and emulated together: what the check weighs
// against its budget.
double reference_stack_flop(const Problem& problem, int64_t heads);

}  // namespace flashbench
