#include "flashbench/harness/reference.hpp"

#include <algorithm>
#include <cmath>

#include "flashbench/core/philox.hpp"
#include "flashbench/core/result.hpp"
#include "flashbench/core/storage.hpp"

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

// The emulated run's gradients as a framework leaves them: each stored in the dtype once summed.
void store_gradients(const Storage& stored, std::vector<double>& dQ, std::vector<double>& dK, std::vector<double>& dV) {
  if (!stored.emulate) return;
  for (std::vector<double>* tensor : {&dQ, &dK, &dV})
    for (double& x : *tensor) x = stored(x);
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
  store_gradients(stored, r.dQ, r.dK, r.dV);
  return r;
}

namespace {

// One head's row statistics, as head_layer computes them in `Acc`: the row maximum of the stored S,
// the sum of exp(S − max), and D = Σ_j P_ij·dP_ij.
struct RowStats {
  double max = 0, sum = 0, D = 0;
};

// S_ij of one head as head_layer stores it.
template <class Acc>
double score(const HeadShape& h, const double* Q, const double* K, int64_t i, int64_t j, const Storage& stored) {
  const double scale = 1.0 / std::sqrt(double(h.d));
  return stored(double(Acc(scale) * Acc(dot<Acc>(Q + i * h.d, K + j * h.d, h.d))));
}

// dP_ij = (dO·Vᵀ)_ij ∘ Z/(1 − p), as head_layer stores it.
template <class Acc>
double dprob(const HeadShape& h, const double* dO, const double* V, int64_t i, int64_t j, const Storage& stored) {
  return stored(double(Acc(stored(dot<Acc>(dO + i * h.d, V + j * h.d, h.d))) * Acc(h.keep(i, j))));
}

// P_ij from the row's statistics, as head_layer stores it.
template <class Acc>
double prob(double s, const RowStats& row, const Storage& stored) {
  return stored(double(std::exp(Acc(s - row.max)) / Acc(row.sum)));
}

template <class Acc>
double sampled_head(const HeadShape& h, const double* Q, const double* K, const double* V, const double* dO,
                    std::span<const int64_t> queries, std::span<const int64_t> keys, const Storage& stored, double* O,
                    double* dQ, double* dK, double* dV) {
  const int64_t N = h.N, Nk = h.Nk, d = h.d;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<RowStats> rows(N);
  double max_abs_score = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(max : max_abs_score)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t visible = h.visible(i);
    std::vector<double> s(visible);
    RowStats& row = rows[i];
    row.max = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) {
      s[j] = score<Acc>(h, Q, K, i, j, stored);
      max_abs_score = std::max(max_abs_score, std::fabs(s[j]));
      row.max = std::max(row.max, s[j]);
    }
    Acc sum = 0;
    for (int64_t j = 0; j < visible; ++j) sum += std::exp(Acc(s[j] - row.max));
    row.sum = double(sum);
    Acc D = 0;
    for (int64_t j = 0; j < visible; ++j) D += Acc(prob<Acc>(s[j], row, stored)) * Acc(dprob<Acc>(h, dO, V, i, j, stored));
    row.D = double(D);
  }
  // O and dQ of the sampled query rows.
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t r = 0; r < queries.size(); ++r) {
    const int64_t i = queries[r], visible = h.visible(i);
    std::vector<Acc> o(d, Acc(0)), dq(d, Acc(0));
    for (int64_t j = 0; j < visible; ++j) {
      const double p = prob<Acc>(score<Acc>(h, Q, K, i, j, stored), rows[i], stored);
      const Acc dropped = Acc(stored(double(Acc(p) * Acc(h.keep(i, j)))));
      const Acc ds = Acc(stored(double(Acc(p) * (Acc(dprob<Acc>(h, dO, V, i, j, stored)) - Acc(rows[i].D)))));
      for (int64_t k = 0; k < d; ++k) {
        o[k] += dropped * Acc(V[j * d + k]);
        dq[k] += ds * Acc(K[j * d + k]);
      }
    }
    for (int64_t k = 0; k < d; ++k) {
      O[r * d + k] = stored(double(o[k]));
      dQ[r * d + k] = double(Acc(scale) * dq[k]);
    }
  }
  // dK and dV of the sampled key rows: over the query rows that see key j.
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t r = 0; r < keys.size(); ++r) {
    const int64_t j = keys[r];
    std::vector<Acc> dv(d, Acc(0)), dk(d, Acc(0));
    for (int64_t i = 0; i < N; ++i) {
      if (j >= h.visible(i)) continue;
      const double p = prob<Acc>(score<Acc>(h, Q, K, i, j, stored), rows[i], stored);
      const Acc dropped = Acc(stored(double(Acc(p) * Acc(h.keep(i, j)))));
      const Acc ds = Acc(stored(double(Acc(p) * (Acc(dprob<Acc>(h, dO, V, i, j, stored)) - Acc(rows[i].D)))));
      for (int64_t k = 0; k < d; ++k) {
        dv[k] += dropped * Acc(dO[i * d + k]);
        dk[k] += ds * Acc(Q[i * d + k]);
      }
    }
    for (int64_t k = 0; k < d; ++k) {
      dV[r * d + k] = double(dv[k]);
      dK[r * d + k] = double(Acc(scale) * dk[k]);
    }
  }
  (void)Nk;
  return max_abs_score;
}

}  // namespace

SampledReference reference_sampled(const ReferenceShape& s, std::span<const double> Q, std::span<const double> K,
                                   std::span<const double> V, std::span<const double> dO,
                                   std::span<const int64_t> queries, std::span<const int64_t> keys,
                                   std::optional<Dtype> emulate) {
  const int64_t N = s.seq, Nk = s.key_rows(), d = s.head_dim, q_size = N * d, kv_size = Nk * d;
  const int64_t kv_heads = s.heads / s.group_size;
  const int64_t nq = int64_t(queries.size()), nk = int64_t(keys.size());
  SampledReference r{std::vector<double>(s.heads * nq * d), std::vector<double>(s.heads * nq * d),
                     std::vector<double>(kv_heads * nk * d, 0.0), std::vector<double>(kv_heads * nk * d, 0.0)};
  std::vector<double> dK(nk * d), dV(nk * d);
  const Storage stored{emulate};
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t q = h * q_size, kv = h / s.group_size * kv_size;
    const HeadShape shape = head_shape(s, h, s.dropout_offset);
    const double largest =
        emulate ? sampled_head<float>(shape, &Q[q], &K[kv], &V[kv], &dO[q], queries, keys, stored, &r.O[h * nq * d],
                                      &r.dQ[h * nq * d], dK.data(), dV.data())
                : sampled_head<double>(shape, &Q[q], &K[kv], &V[kv], &dO[q], queries, keys, stored, &r.O[h * nq * d],
                                       &r.dQ[h * nq * d], dK.data(), dV.data());
    r.max_abs_score = std::max(r.max_abs_score, largest);
    const int64_t out = h / s.group_size * nk * d;
    for (int64_t e = 0; e < nk * d; ++e) {  // a K/V head's gradients sum over the query heads reading it
      r.dK[out + e] += dK[e];
      r.dV[out + e] += dV[e];
    }
  }
  store_gradients(stored, r.dQ, r.dK, r.dV);
  return r;
}

double reference_layer_flop(const Problem& p, int64_t heads) {
  // Per head: the forward's two products (4·N·N_k·d) and the backward's four (8·N·N_k·d) with the
  // scores recomputed (4·N·N_k·d), 16·N·N_k·d, for the exact and the emulated run.
  const double N = double(p.seq), Nk = double(p.key_seq()), d = double(p.head_dim);
  return 2.0 * 16.0 * N * Nk * d * double(heads);
}

double layer_scale(std::span<const double> O, std::span<const double> dQ, std::span<const double> dK,
                   std::span<const double> dV) {
  return std::max({max_abs(O), max_abs(dQ), max_abs(dK), max_abs(dV)});
}

double reference_sampled_flop(const Problem& p, int64_t heads, int64_t queries, int64_t keys) {
  // Per head: S and dP of every row (4·N·N_k·d), then per sampled query row S, dP, O and dQ over
  // the keys (8·N_k·d) and per sampled key row the same over the queries (8·N·d); exact and emulated.
  const double N = double(p.seq), Nk = double(p.key_seq()), d = double(p.head_dim);
  return 2.0 * double(heads) * (4.0 * N * Nk * d + 8.0 * d * (double(queries) * Nk + double(keys) * N));
}

}  // namespace flashbench
