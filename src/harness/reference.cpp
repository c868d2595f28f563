#include "flashbench/harness/reference.hpp"

#include <algorithm>
#include <cmath>

#include "flashbench/storage.hpp"

namespace flashbench {

namespace {

// Rounds a stored tensor's value to the emulated dtype, or leaves it exact.
struct Storage {
  std::optional<Dtype> emulate;
  double operator()(double x) const { return emulate ? round_to(*emulate, x) : x; }
};

// Sums in `Acc`: double for the exact run; float for the naive one, whose products accumulate in
// fp32 as a framework's matrix products and reductions do (the 16-bit formats only store).
// Eight partial sums, as a vectorised matrix product keeps them (and so that the exact run is not
// bound by the latency of one chain of additions).
template <class Acc>
double dot(const double* a, const double* b, int64_t d) {
  constexpr int kLanes = 8;
  Acc partial[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= d; k += kLanes)
    for (int lane = 0; lane < kLanes; ++lane) partial[lane] += Acc(a[k + lane]) * Acc(b[k + lane]);
  Acc sum = 0;
  for (int lane = 0; lane < kLanes; ++lane) sum += partial[lane];
  for (; k < d; ++k) sum += Acc(a[k]) * Acc(b[k]);
  return double(sum);
}

// One head: Q, K, V, dO, O, dQ, dK, dV point at its [N, d] slices. P and dS are [N, N] scratch.
// Rows are independent in the forward and in dQ; dK and dV gather over rows, so they loop over
// columns j instead, each thread owning its own rows of dK and dV.
template <class Acc>
double head_layer(int64_t N, int64_t d, bool causal, const double* Q, const double* K, const double* V,
                  const double* dO, double* O, double* dQ, double* dK, double* dV, std::vector<double>& P,
                  std::vector<double>& dS, const Storage& stored, bool backward) {
  const double scale = 1.0 / std::sqrt(double(d));
  double max_abs_score = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(max : max_abs_score)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t visible = causal ? i + 1 : N;
    double* p = &P[i * N];
    double row_max = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) {
      p[j] = stored(double(Acc(scale) * Acc(dot<Acc>(Q + i * d, K + j * d, d))));
      max_abs_score = std::max(max_abs_score, std::fabs(p[j]));
      row_max = std::max(row_max, p[j]);
    }
    Acc sum = 0;
    for (int64_t j = 0; j < visible; ++j) sum += std::exp(Acc(p[j] - row_max));
    for (int64_t j = 0; j < visible; ++j) p[j] = stored(double(std::exp(Acc(p[j] - row_max)) / sum));
    std::fill(p + visible, p + N, 0.0);
    std::vector<Acc> o(d, Acc(0));
    for (int64_t j = 0; j < visible; ++j)
      for (int64_t k = 0; k < d; ++k) o[k] += Acc(p[j]) * Acc(V[j * d + k]);
    for (int64_t k = 0; k < d; ++k) O[i * d + k] = stored(double(o[k]));
  }
  if (!backward) return max_abs_score;
  // dP = dO·Vᵀ, D_i = Σ_j P_ij·dP_ij over the whole row, dS = P ∘ (dP − D); dQ = scale·dS·K.
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < N; ++i) {
    const double* p = &P[i * N];
    double* ds = &dS[i * N];
    Acc D = 0;
    for (int64_t j = 0; j < N; ++j) {
      ds[j] = stored(dot<Acc>(dO + i * d, V + j * d, d));
      D += Acc(p[j]) * Acc(ds[j]);
    }
    for (int64_t j = 0; j < N; ++j) ds[j] = stored(double(Acc(p[j]) * (Acc(ds[j]) - D)));
    std::vector<Acc> dq(d, Acc(0));
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < d; ++k) dq[k] += Acc(ds[j]) * Acc(K[j * d + k]);
    for (int64_t k = 0; k < d; ++k) dQ[i * d + k] = double(Acc(scale) * dq[k]);
  }
  // dV = Pᵀ·dO, dK = scale·dSᵀ·Q, eight columns at a time so that each read of a row of P and dS
  // uses a whole cache line.
  constexpr int64_t kColumns = 8;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t j0 = 0; j0 < N; j0 += kColumns) {
    const int64_t j1 = std::min(N, j0 + kColumns);
    std::vector<Acc> dv((j1 - j0) * d, Acc(0)), dk((j1 - j0) * d, Acc(0));
    for (int64_t i = causal ? j0 : 0; i < N; ++i)
      for (int64_t j = j0; j < j1; ++j) {
        const Acc p = Acc(P[i * N + j]), ds = Acc(dS[i * N + j]);
        Acc* dv_j = &dv[(j - j0) * d];
        Acc* dk_j = &dk[(j - j0) * d];
        for (int64_t k = 0; k < d; ++k) {
          dv_j[k] += p * Acc(dO[i * d + k]);
          dk_j[k] += ds * Acc(Q[i * d + k]);
        }
      }
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t k = 0; k < d; ++k) {
        dV[j * d + k] = double(dv[(j - j0) * d + k]);
        dK[j * d + k] = double(Acc(scale) * dk[(j - j0) * d + k]);
      }
  }
  return max_abs_score;
}

// The exact run in double, the emulated one accumulating in float.
double head_layer(int64_t N, int64_t d, bool causal, const double* Q, const double* K, const double* V,
                  const double* dO, double* O, double* dQ, double* dK, double* dV, std::vector<double>& P,
                  std::vector<double>& dS, const Storage& stored, bool backward) {
  if (stored.emulate) return head_layer<float>(N, d, causal, Q, K, V, dO, O, dQ, dK, dV, P, dS, stored, backward);
  return head_layer<double>(N, d, causal, Q, K, V, dO, O, dQ, dK, dV, P, dS, stored, backward);
}

}  // namespace

LayerReference reference_layer(const ReferenceShape& s, std::span<const double> Q, std::span<const double> K,
                               std::span<const double> V, std::span<const double> dO, std::optional<Dtype> emulate) {
  const int64_t N = s.seq, d = s.head_dim, size = s.heads * N * d;
  LayerReference r{std::vector<double>(size), std::vector<double>(size), std::vector<double>(size),
                   std::vector<double>(size)};
  std::vector<double> P(N * N), dS(N * N);
  const Storage stored{emulate};
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t o = h * N * d;
    r.max_abs_score = std::max(r.max_abs_score,
                               head_layer(N, d, s.causal, &Q[o], &K[o], &V[o], &dO[o], &r.O[o], &r.dQ[o], &r.dK[o],
                                          &r.dV[o], P, dS, stored, true));
  }
  return r;
}

StackReference reference_stack(const ReferenceShape& s, int64_t layers, std::span<const double> X0,
                               std::span<const double> dO, std::optional<Dtype> emulate) {
  const int64_t N = s.seq, d = s.head_dim, size = s.heads * N * d;
  const Storage stored{emulate};
  StackReference result;
  std::vector<double> P(N * N), dS(N * N), scratch(size);
  // X[i] is the input of layer i; the backward recomputes each layer's P from it.
  std::vector<std::vector<double>> X{std::vector<double>(X0.begin(), X0.end())};
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::vector<double> out(size);
    for (int64_t h = 0; h < s.heads; ++h) {
      const double* x = &X[layer][h * N * d];
      result.max_abs_score = std::max(result.max_abs_score,
                                      head_layer(N, d, s.causal, x, x, x, nullptr, &out[h * N * d], nullptr, nullptr,
                                                 nullptr, P, dS, stored, false));
    }
    X.push_back(std::move(out));
  }
  std::vector<double> grad(dO.begin(), dO.end()), dQ(size), dK(size), dV(size);
  for (int64_t layer = layers - 1; layer >= 0; --layer) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t o = h * N * d;
      const double* x = &X[layer][o];
      head_layer(N, d, s.causal, x, x, x, &grad[o], &scratch[o], &dQ[o], &dK[o], &dV[o], P, dS, stored, true);
    }
    // dX = dV + dQ + dK, rounded after each accumulation as a framework storing dX would.
    for (int64_t e = 0; e < size; ++e) {
      if (emulate) grad[e] = stored(double(float(stored(double(float(stored(dV[e])) + float(dQ[e])))) + float(dK[e])));
      else grad[e] = dV[e] + dQ[e] + dK[e];
    }
  }
  result.output = std::move(X[layers]);
  result.input_grad = std::move(grad);
  return result;
}

namespace {
template <class Acc>
std::vector<double> output_rows(int64_t N, int64_t d, bool causal, std::span<const double> X,
                                std::span<const int64_t> rows, const Storage& stored, double* max_abs_score) {
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> out(rows.size() * d, 0.0), p(N);
  double largest = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t i = rows[r], visible = causal ? i + 1 : N;
    double row_max = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) {
      p[j] = stored(double(Acc(scale) * Acc(dot<Acc>(&X[i * d], &X[j * d], d))));
      largest = std::max(largest, std::fabs(p[j]));
      row_max = std::max(row_max, p[j]);
    }
    Acc sum = 0;
    for (int64_t j = 0; j < visible; ++j) sum += std::exp(Acc(p[j] - row_max));
    std::vector<Acc> o(d, Acc(0));
    for (int64_t j = 0; j < visible; ++j) {
      const Acc weight = Acc(stored(double(std::exp(Acc(p[j] - row_max)) / sum)));
      for (int64_t k = 0; k < d; ++k) o[k] += weight * Acc(X[j * d + k]);
    }
    for (int64_t k = 0; k < d; ++k) out[r * d + k] = stored(double(o[k]));
  }
  if (max_abs_score) *max_abs_score = largest;
  return out;
}
}  // namespace

std::vector<double> reference_output_rows(int64_t N, int64_t d, bool causal, std::span<const double> X,
                                          std::span<const int64_t> rows, std::optional<Dtype> emulate,
                                          double* max_abs_score) {
  const Storage stored{emulate};
  if (emulate) return output_rows<float>(N, d, causal, X, rows, stored, max_abs_score);
  return output_rows<double>(N, d, causal, X, rows, stored, max_abs_score);
}

double reference_stack_flop(const Problem& p, int64_t heads) {
  // Per head and layer: the forward (S and O, 4·N²·d) twice — once going up, once recomputed in
  // backward — and the backward's four N²·d products (8·N²·d): 16·N²·d, for the exact and the
  // emulated run.
  const double N = double(p.seq), d = double(p.head_dim);
  return 2.0 * 16.0 * N * N * d * double(p.layers) * double(heads);
}

}  // namespace flashbench
