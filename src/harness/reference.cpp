#include "flashbench/harness/reference.hpp"

#include <algorithm>
#include <cmath>

#include "flashbench/philox.hpp"
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

// One head's extents: N query rows, Nk key rows, d features; the causal mask bottom-right aligned.
struct HeadShape {
  int64_t N, Nk, d;
  bool causal;
  philox::DropoutMask mask;  // of this layer
  int64_t head = 0;          // the head's flattened index in the whole problem, for the mask
  // Row i sees columns 0 … i + Nk − N (none when that is negative), or all Nk.
  int64_t visible(int64_t i) const { return causal ? std::clamp<int64_t>(i + Nk - N + 1, 0, Nk) : Nk; }
  // Z_ij/(1 − p): what weight (i, j) is multiplied by after the softmax (1 without dropout).
  double keep(int64_t i, int64_t j) const {
    return mask.active() ? double(mask.factor(uint64_t((head * N + i) * Nk + j))) : 1.0;
  }
};

// One head: Q, dO, O, dQ point at its [N, d] slices, K, V, dK, dV at its K/V head's [Nk, d]. P and
// dS are [N, Nk] scratch. dK and dV are this head's own contributions (the caller sums a group's).
// Rows are independent in the forward and in dQ; dK and dV gather over rows, so they loop over
// columns j instead, each thread owning its own rows of dK and dV.
template <class Acc>
double head_layer(const HeadShape& h, const double* Q, const double* K, const double* V,
                  const double* dO, double* O, double* dQ, double* dK, double* dV, std::vector<double>& P,
                  std::vector<double>& dS, const Storage& stored, bool backward) {
  const int64_t N = h.N, Nk = h.Nk, d = h.d;
  const double scale = 1.0 / std::sqrt(double(d));
  double max_abs_score = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(max : max_abs_score)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t visible = h.visible(i);
    double* p = &P[i * Nk];
    double row_max = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) {
      p[j] = stored(double(Acc(scale) * Acc(dot<Acc>(Q + i * d, K + j * d, d))));
      max_abs_score = std::max(max_abs_score, std::fabs(p[j]));
      row_max = std::max(row_max, p[j]);
    }
    Acc sum = 0;
    for (int64_t j = 0; j < visible; ++j) sum += std::exp(Acc(p[j] - row_max));
    for (int64_t j = 0; j < visible; ++j) p[j] = stored(double(std::exp(Acc(p[j] - row_max)) / sum));
    std::fill(p + visible, p + Nk, 0.0);  // a fully masked row is all zeros, and so is its output
    std::vector<Acc> o(d, Acc(0));
    for (int64_t j = 0; j < visible; ++j) {
      const Acc dropped = Acc(stored(double(Acc(p[j]) * Acc(h.keep(i, j)))));  // P̃, stored as frameworks keep it
      for (int64_t k = 0; k < d; ++k) o[k] += dropped * Acc(V[j * d + k]);
    }
    for (int64_t k = 0; k < d; ++k) O[i * d + k] = stored(double(o[k]));
  }
  if (!backward) return max_abs_score;
  // dP̃ = dO·Vᵀ, dP = dP̃ ∘ Z/(1 − p), D_i = Σ_j P_ij·dP_ij over the whole row, dS = P ∘ (dP − D);
  // dQ = scale·dS·K.
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < N; ++i) {
    const double* p = &P[i * Nk];
    double* ds = &dS[i * Nk];
    Acc D = 0;
    for (int64_t j = 0; j < Nk; ++j) {
      ds[j] = stored(double(Acc(stored(dot<Acc>(dO + i * d, V + j * d, d))) * Acc(h.keep(i, j))));
      D += Acc(p[j]) * Acc(ds[j]);
    }
    for (int64_t j = 0; j < Nk; ++j) ds[j] = stored(double(Acc(p[j]) * (Acc(ds[j]) - D)));
    std::vector<Acc> dq(d, Acc(0));
    for (int64_t j = 0; j < Nk; ++j)
      for (int64_t k = 0; k < d; ++k) dq[k] += Acc(ds[j]) * Acc(K[j * d + k]);
    for (int64_t k = 0; k < d; ++k) dQ[i * d + k] = double(Acc(scale) * dq[k]);
  }
  // dV = P̃ᵀ·dO, dK = scale·dSᵀ·Q, eight columns at a time so that each read of a row of P and dS
  // uses a whole cache line.
  constexpr int64_t kColumns = 8;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t j0 = 0; j0 < Nk; j0 += kColumns) {
    const int64_t j1 = std::min(Nk, j0 + kColumns);
    std::vector<Acc> dv((j1 - j0) * d, Acc(0)), dk((j1 - j0) * d, Acc(0));
    for (int64_t i = 0; i < N; ++i)  // P and dS are 0 where masked
      for (int64_t j = j0; j < j1; ++j) {
        const Acc p = Acc(stored(double(Acc(P[i * Nk + j]) * Acc(h.keep(i, j))))), ds = Acc(dS[i * Nk + j]);
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
double head_layer(const HeadShape& h, const double* Q, const double* K, const double* V,
                  const double* dO, double* O, double* dQ, double* dK, double* dV, std::vector<double>& P,
                  std::vector<double>& dS, const Storage& stored, bool backward) {
  if (stored.emulate) return head_layer<float>(h, Q, K, V, dO, O, dQ, dK, dV, P, dS, stored, backward);
  return head_layer<double>(h, Q, K, V, dO, O, dQ, dK, dV, P, dS, stored, backward);
}

// Head k of the computed ones in layer `layer` (the mask's offset).
HeadShape head_shape(const ReferenceShape& s, int64_t k = 0, uint64_t layer = 0) {
  const int64_t head = s.head_index.empty() ? k : s.head_index[k];
  return {s.seq, s.key_rows(), s.head_dim, s.causal, philox::make_dropout_mask(s.dropout, s.dropout_seed, layer), head};
}

}  // namespace

LayerReference reference_layer(const ReferenceShape& s, std::span<const double> Q, std::span<const double> K,
                               std::span<const double> V, std::span<const double> dO, std::optional<Dtype> emulate) {
  const int64_t N = s.seq, Nk = s.key_rows(), d = s.head_dim, q_size = N * d, kv_size = Nk * d;
  const int64_t kv_heads = s.heads / s.group_size;
  LayerReference r{std::vector<double>(s.heads * q_size), std::vector<double>(s.heads * q_size),
                   std::vector<double>(kv_heads * kv_size, 0.0), std::vector<double>(kv_heads * kv_size, 0.0)};
  std::vector<double> P(N * Nk), dS(N * Nk), dK(kv_size), dV(kv_size);
  const Storage stored{emulate};
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t q = h * q_size, kv = h / s.group_size * kv_size;
    const HeadShape shape = head_shape(s, h, s.dropout_offset);
    r.max_abs_score = std::max(r.max_abs_score, head_layer(shape, &Q[q], &K[kv], &V[kv], &dO[q], &r.O[q], &r.dQ[q],
                                                           dK.data(), dV.data(), P, dS, stored, true));
    for (int64_t e = 0; e < kv_size; ++e) {  // a K/V head's gradients sum over the query heads reading it
      r.dK[kv + e] += dK[e];
      r.dV[kv + e] += dV[e];
    }
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
                                      head_layer(head_shape(s, h, uint64_t(layer)), x, x, x, nullptr, &out[h * N * d], nullptr, nullptr,
                                                 nullptr, P, dS, stored, false));
    }
    X.push_back(std::move(out));
  }
  std::vector<double> grad(dO.begin(), dO.end()), dQ(size), dK(size), dV(size);
  for (int64_t layer = layers - 1; layer >= 0; --layer) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t o = h * N * d;
      const double* x = &X[layer][o];
      head_layer(head_shape(s, h, uint64_t(layer)), x, x, x, &grad[o], &scratch[o], &dQ[o], &dK[o], &dV[o], P, dS,
                 stored, true);
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

CrossStackReference reference_cross_stack(const ReferenceShape& s, int64_t layers, std::span<const double> X0,
                                          std::span<const double> dO, std::span<const double> C,
                                          std::span<const int64_t> context_head, std::optional<Dtype> emulate) {
  const int64_t N = s.seq, Nk = s.key_rows(), d = s.head_dim, size = s.heads * N * d, kv_size = Nk * d;
  const Storage stored{emulate};
  CrossStackReference result;
  result.context_grad.assign(C.size(), 0.0);
  std::vector<double> P(N * Nk), dS(N * Nk), scratch(N * d), dK(kv_size), dV(kv_size);
  std::vector<std::vector<double>> X{std::vector<double>(X0.begin(), X0.end())};
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::vector<double> out(size);
    for (int64_t h = 0; h < s.heads; ++h) {
      const double* c = &C[context_head[h] * kv_size];
      result.max_abs_score = std::max(result.max_abs_score,
                                      head_layer(head_shape(s, h, uint64_t(layer)), &X[layer][h * N * d], c, c, nullptr, &out[h * N * d], nullptr,
                                                 nullptr, nullptr, P, dS, stored, false));
    }
    X.push_back(std::move(out));
  }
  // dX_i = dQ of layer i; dC gathers dK + dV of every layer and every query head reading it, rounded
  // after each accumulation as a framework storing dC would.
  std::vector<double> grad(dO.begin(), dO.end()), dQ(N * d);
  for (int64_t layer = layers - 1; layer >= 0; --layer) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t o = h * N * d;
      const double* c = &C[context_head[h] * kv_size];
      head_layer(head_shape(s, h, uint64_t(layer)), &X[layer][o], c, c, &grad[o], scratch.data(), dQ.data(), dK.data(), dV.data(), P, dS, stored,
                 true);
      for (int64_t e = 0; e < N * d; ++e) grad[o + e] = stored(dQ[e]);
      double* dc = &result.context_grad[context_head[h] * kv_size];
      for (int64_t e = 0; e < kv_size; ++e) {
        if (emulate) dc[e] = stored(double(float(stored(double(float(dc[e]) + float(dK[e])))) + float(dV[e])));
        else dc[e] += dK[e] + dV[e];
      }
    }
  }
  result.output = std::move(X[layers]);
  result.input_grad = std::move(grad);
  return result;
}

namespace {
template <class Acc>
std::vector<double> output_rows(const HeadShape& h, std::span<const double> Q, std::span<const double> KV,
                                std::span<const int64_t> rows, const Storage& stored, double* max_abs_score) {
  const int64_t d = h.d;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> out(rows.size() * d, 0.0), p(h.Nk);
  double largest = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t i = rows[r], visible = h.visible(i);
    double row_max = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) {
      p[j] = stored(double(Acc(scale) * Acc(dot<Acc>(&Q[i * d], &KV[j * d], d))));
      largest = std::max(largest, std::fabs(p[j]));
      row_max = std::max(row_max, p[j]);
    }
    Acc sum = 0;
    for (int64_t j = 0; j < visible; ++j) sum += std::exp(Acc(p[j] - row_max));
    std::vector<Acc> o(d, Acc(0));
    for (int64_t j = 0; j < visible; ++j) {
      const Acc weight = Acc(stored(double(Acc(stored(double(std::exp(Acc(p[j] - row_max)) / sum))) * Acc(h.keep(i, j)))));
      for (int64_t k = 0; k < d; ++k) o[k] += weight * Acc(KV[j * d + k]);
    }
    for (int64_t k = 0; k < d; ++k) out[r * d + k] = stored(double(o[k]));
  }
  if (max_abs_score) *max_abs_score = largest;
  return out;
}
}  // namespace

std::vector<double> reference_output_rows(const ReferenceShape& s, std::span<const double> Q,
                                          std::span<const double> KV, std::span<const int64_t> rows,
                                          std::optional<Dtype> emulate, double* max_abs_score) {
  const Storage stored{emulate};
  const HeadShape head = head_shape(s, 0, s.dropout_offset);
  if (emulate) return output_rows<float>(head, Q, KV, rows, stored, max_abs_score);
  return output_rows<double>(head, Q, KV, rows, stored, max_abs_score);
}

double reference_stack_flop(const Problem& p, int64_t heads) {
  // Per head and layer: the forward (S and O, 4·N·N_k·d) twice — once going up, once recomputed in
  // backward — and the backward's four N²·d products (8·N²·d): 16·N²·d, for the exact and the
  // emulated run.
  const double N = double(p.seq), Nk = double(p.key_seq()), d = double(p.head_dim);
  return 2.0 * 16.0 * N * Nk * d * double(p.layers) * double(heads);
}

}  // namespace flashbench
