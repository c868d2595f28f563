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
// reductions do, and every tensor the standard variant stores — S, P, P̃, O, dP, dS — is rounded to
// the dtype, and so are dQ, dK and dV once summed. Its error against the exact run is the bar
// an implementation is judged by (FlashAttention's: a small multiple of it; runner.cpp).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "flashbench/core/problem.hpp"

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

// Sampled rows of one layer, for sizes where the whole layer is past the check's budget: with Q, K,
// V, dO as reference_layer's, the exact row statistics of every query row (max, sum and
// D_i = Σ_j P_ij·dP_ij, which the full backward uses), then O and dQ of query rows `queries` of every
// head ([heads, |queries|, d]) and dK and dV of key rows `keys` of every K/V head ([heads/r, |keys|,
// d], summed over its r query heads). Every number is the one reference_layer computes, in the same
// order of operations (the emulated run too); it costs O(heads·N·N_k·d) for the statistics and
// O(|keys|·N·d) per head for the key rows.
struct SampledReference {
  std::vector<double> O, dQ, dK, dV;
  double max_abs_score = 0;
};
SampledReference reference_sampled(const ReferenceShape& shape, std::span<const double> Q, std::span<const double> K,
                                   std::span<const double> V, std::span<const double> dO,
                                   std::span<const int64_t> queries, std::span<const int64_t> keys,
                                   std::optional<Dtype> emulate = std::nullopt);

// The largest max |ref| over a layer's O, dQ, dK, dV (an empty one counts 0): the scale against which
// a tensor of it that is zero throughout is judged (max_relative_error's scale_if_zero).
double layer_scale(std::span<const double> O, std::span<const double> dQ, std::span<const double> dK,
                   std::span<const double> dV);

// FLOP of reference_layer on `heads` query heads of `problem`, exact and emulated together: what
// the check weighs against its budget.
double reference_layer_flop(const Problem& problem, int64_t heads);
// FLOP of reference_sampled on `heads` query heads with `queries` query rows and `keys` key rows
// sampled, exact and emulated together.
double reference_sampled_flop(const Problem& problem, int64_t heads, int64_t queries, int64_t keys);

}  // namespace flashbench
