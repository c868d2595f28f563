#include "support/reference.hpp"

#include <cmath>
#include <random>

#include "flashbench/harness/reference.hpp"

namespace flashbench::testing {

// The float64 reference is the harness's (harness/reference.hpp); these adapt it to the tests' types.
LayerGrads reference_layer(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                           const std::vector<double>& V, const std::vector<double>& dO) {
  LayerReference r = flashbench::reference_layer({s.BH, s.N, s.d, s.causal}, Q, K, V, dO);
  return {std::move(r.O), std::move(r.dQ), std::move(r.dK), std::move(r.dV)};
}

std::vector<double> reference_output(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                                     const std::vector<double>& V) {
  return reference_layer(s, Q, K, V, std::vector<double>(Q.size(), 0.0)).O;
}

StackGrads reference_stack(const Shape& s, const std::vector<LayerData>& layers) {
  StackGrads result;
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerGrads layer = reference_layer(s, layers[i].Q, layers[i].K, layers[i].V, layers[i].dO);
    result.outputs.push_back(std::move(layer.O));
    if (i == 0) {
      result.dQ = std::move(layer.dQ);
      result.dK = std::move(layer.dK);
      result.dV = std::move(layer.dV);
    }
  }
  return result;
}

double normwise_error(const std::vector<float>& x, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
    norm += ref[i] * ref[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }
std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::vector<float> random_normal(int64_t count, uint64_t seed, float stddev) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> x(count);
  for (float& v : x) v = normal(generator);
  return x;
}

}  // namespace flashbench::testing
