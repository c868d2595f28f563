#pragma once
// The one float64 reference: attention forward and backward as plain loops straight from the
// formulas, sharing no code with any kernel. Per head h, with N rows of d features:
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
  int64_t heads;     // heads computed (the stack's heads are independent of each other)
  int64_t seq;       // N
  int64_t head_dim;  // d
  bool causal;
};

// One layer, Q, K, V, dO [heads, N, d]: O and the gradients of sum(O ∘ dO).
struct LayerReference {
  std::vector<double> O, dQ, dK, dV;
  double max_abs_score = 0;  // the largest |S_ij| seen
};
LayerReference reference_layer(const ReferenceShape& shape, std::span<const double> Q, std::span<const double> K,
                               std::span<const double> V, std::span<const double> dO,
                               std::optional<Dtype> emulate = std::nullopt);

// The chained stack of `layers` layers with Q = K = V = X_i and dX_i = dQ + dK + dV: X_L and dX_0.
struct StackReference {
  std::vector<double> output, input_grad;
  double max_abs_score = 0;  // the largest |S_ij| of any layer
};
StackReference reference_stack(const ReferenceShape& shape, int64_t layers, std::span<const double> X0,
                               std::span<const double> dO, std::optional<Dtype> emulate = std::nullopt);

// Rows `rows` of one layer's output O for one head X [N, d] (Q = K = V = X): [rows.size(), d].
// Costs O(rows·N·d), where the whole layer costs O(N²·d).
std::vector<double> reference_output_rows(int64_t seq, int64_t head_dim, bool causal, std::span<const double> X,
                                          std::span<const int64_t> rows, std::optional<Dtype> emulate,
                                          double* max_abs_score);

// FLOP of reference_stack on `heads` heads, exact and emulated together: what the check weighs
// against its budget.
double reference_stack_flop(const Problem& problem, int64_t heads);

}  // namespace flashbench
