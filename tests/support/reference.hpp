#pragma once
// The tests' view of the float64 reference (the harness's one, harness/reference.hpp: plain loops
// straight from the formulas, sharing no code with the kernels), and helpers for random inputs and
// norm-wise errors.
#include <cstdint>
#include <vector>

namespace flashbench::testing {

struct Shape {
  int64_t BH, N, d;
  bool causal;
};

struct LayerGrads {
  std::vector<double> O, dQ, dK, dV;  // each [BH, N, d]
};

// Q, K, V, dO: [BH, N, d]. Returns O and the gradients of sum(O ∘ dO).
LayerGrads reference_layer(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                           const std::vector<double>& V, const std::vector<double>& dO);

// One layer's inputs of a stack: Q, K, V and the gradient dO of its output, each [BH, N, d].
struct LayerData {
  std::vector<double> Q, K, V, dO;
};
// The stack's layers are independent (harness/stack.hpp): each layer's output O_i, and layer 0's
// gradients (the ones the stack returns).
struct StackGrads {
  std::vector<std::vector<double>> outputs;
  std::vector<double> dQ, dK, dV;
};
StackGrads reference_stack(const Shape& s, const std::vector<LayerData>& layers);

// Only the forward output, for finite differences.
std::vector<double> reference_output(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                                     const std::vector<double>& V);

// Norm-wise relative error ||x − ref||₂ / ||ref||₂.
double normwise_error(const std::vector<float>& x, const std::vector<double>& ref);

std::vector<float> to_float(const std::vector<double>& x);
std::vector<double> to_double(const std::vector<float>& x);
std::vector<float> random_normal(int64_t count, uint64_t seed, float stddev = 1.0f);

}  // namespace flashbench::testing
