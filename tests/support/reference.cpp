#include "support/reference.hpp"

#include <cmath>
#include <random>

namespace flashbench::testing {

namespace {
bool masked(const Shape& s, int64_t i, int64_t j) { return s.causal && j > i; }
}  // namespace

LayerGrads reference_layer(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                           const std::vector<double>& V, const std::vector<double>& dO) {
  const int64_t N = s.N, d = s.d;
  const double scale = 1.0 / std::sqrt(double(d));
  LayerGrads g{std::vector<double>(Q.size()), std::vector<double>(Q.size()), std::vector<double>(Q.size()),
               std::vector<double>(Q.size())};
  std::vector<double> P(N * N), dP(N * N);
  for (int64_t h = 0; h < s.BH; ++h) {
    const int64_t o = h * N * d;
    // S = scale·Q·Kᵀ, P = softmax(S) row-wise over unmasked columns.
    for (int64_t i = 0; i < N; ++i) {
      double row_max = -INFINITY;
      for (int64_t j = 0; j < N; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < d; ++k) dot += Q[o + i * d + k] * K[o + j * d + k];
        P[i * N + j] = masked(s, i, j) ? -INFINITY : scale * dot;
        row_max = std::max(row_max, P[i * N + j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < N; ++j) sum += P[i * N + j] = std::exp(P[i * N + j] - row_max);
      for (int64_t j = 0; j < N; ++j) P[i * N + j] /= sum;
    }
    // O = P·V
    for (int64_t i = 0; i < N; ++i)
      for (int64_t k = 0; k < d; ++k) {
        double sum = 0;
        for (int64_t j = 0; j < N; ++j) sum += P[i * N + j] * V[o + j * d + k];
        g.O[o + i * d + k] = sum;
      }
    // dV = Pᵀ·dO, dP = dO·Vᵀ
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < d; ++k) {
        double sum = 0;
        for (int64_t i = 0; i < N; ++i) sum += P[i * N + j] * dO[o + i * d + k];
        g.dV[o + j * d + k] = sum;
      }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < d; ++k) sum += dO[o + i * d + k] * V[o + j * d + k];
        dP[i * N + j] = sum;
      }
    // D_i = Σ_j P_ij·dP_ij over the whole row; dS = P ∘ (dP − D) (stored in dP)
    for (int64_t i = 0; i < N; ++i) {
      double D = 0;
      for (int64_t j = 0; j < N; ++j) D += P[i * N + j] * dP[i * N + j];
      for (int64_t j = 0; j < N; ++j) dP[i * N + j] = P[i * N + j] * (dP[i * N + j] - D);
    }
    // dQ = scale·dS·K, dK = scale·dSᵀ·Q
    for (int64_t i = 0; i < N; ++i)
      for (int64_t k = 0; k < d; ++k) {
        double sum_q = 0, sum_k = 0;
        for (int64_t j = 0; j < N; ++j) {
          sum_q += dP[i * N + j] * K[o + j * d + k];
          sum_k += dP[j * N + i] * Q[o + j * d + k];
        }
        g.dQ[o + i * d + k] = scale * sum_q;
        g.dK[o + i * d + k] = scale * sum_k;
      }
  }
  return g;
}

std::vector<double> reference_output(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                                     const std::vector<double>& V) {
  return reference_layer(s, Q, K, V, std::vector<double>(Q.size(), 0.0)).O;
}

StackGrads reference_stack(const Shape& s, int64_t L, const std::vector<double>& X0, const std::vector<double>& dO) {
  std::vector<std::vector<double>> X{X0};
  for (int64_t i = 0; i < L; ++i) X.push_back(reference_output(s, X[i], X[i], X[i]));
  std::vector<double> grad = dO;
  for (int64_t i = L - 1; i >= 0; --i) {
    const LayerGrads g = reference_layer(s, X[i], X[i], X[i], grad);
    for (size_t e = 0; e < grad.size(); ++e) grad[e] = g.dQ[e] + g.dK[e] + g.dV[e];
  }
  return {X[L], grad};
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
