#include "naive_attention.h"

#include <math.h>
#include <string.h>

/* Keys row i sees: all N_k, or under the bottom-right causal mask j <= i + N_k - N. */
static int64_t visible_keys(const flashbench_problem* p, int64_t i) {
  if (!p->causal) return p->seq_kv;
  const int64_t visible = i + p->seq_kv - p->seq_q + 1;
  return visible < 0 ? 0 : (visible > p->seq_kv ? p->seq_kv : visible);
}

static float dot(const float* x, const float* y, int64_t d) {
  float sum = 0.0f;
  for (int64_t k = 0; k < d; ++k) sum += x[k] * y[k];
  return sum;
}

void naive_forward(const flashbench_problem* p, const float* Q, const float* K, const float* V, float* O, float* LSE,
                   float* scores) {
  const int64_t N = p->seq_q, Nk = p->seq_kv, d = p->head_dim, r = p->heads / p->kv_heads;
  for (int64_t bh = 0; bh < p->batch * p->heads; ++bh) {
    const int64_t kv = bh / p->heads * p->kv_heads + bh % p->heads / r; /* query head h reads K/V head h / r */
    const float* k = K + kv * Nk * d;
    const float* v = V + kv * Nk * d;
    for (int64_t i = 0; i < N; ++i) {
      const float* q = Q + (bh * N + i) * d;
      float* o = O + (bh * N + i) * d;
      const int64_t visible = visible_keys(p, i);
      memset(o, 0, (size_t)d * sizeof(float));
      if (visible == 0) { /* nothing to attend to: O = 0, and exp(s - LSE) = 0 in backward */
        LSE[bh * N + i] = INFINITY;
        continue;
      }
      float max = -INFINITY, sum = 0.0f;
      for (int64_t j = 0; j < visible; ++j) {
        scores[j] = p->scale * dot(q, k + j * d, d);
        if (scores[j] > max) max = scores[j];
      }
      for (int64_t j = 0; j < visible; ++j) sum += scores[j] = expf(scores[j] - max);
      for (int64_t j = 0; j < visible; ++j)
        for (int64_t c = 0; c < d; ++c) o[c] += scores[j] / sum * v[j * d + c];
      LSE[bh * N + i] = max + logf(sum);
    }
  }
}

void naive_backward(const flashbench_problem* p, const float* Q, const float* K, const float* V, const float* O,
                    const float* dO, const float* LSE, float* dQ, float* dK, float* dV, float* row) {
  const int64_t N = p->seq_q, Nk = p->seq_kv, d = p->head_dim, r = p->heads / p->kv_heads;
  float* P = row;
  float* dP = row + Nk;
  /* dK, dV sum over the r query heads that read each K/V head. */
  memset(dK, 0, (size_t)(p->batch * p->kv_heads * Nk * d) * sizeof(float));
  memset(dV, 0, (size_t)(p->batch * p->kv_heads * Nk * d) * sizeof(float));
  for (int64_t bh = 0; bh < p->batch * p->heads; ++bh) {
    const int64_t kv = bh / p->heads * p->kv_heads + bh % p->heads / r;
    const float* k = K + kv * Nk * d;
    const float* v = V + kv * Nk * d;
    float* dk = dK + kv * Nk * d;
    float* dv = dV + kv * Nk * d;
    for (int64_t i = 0; i < N; ++i) {
      const float* q = Q + (bh * N + i) * d;
      const float* do_ = dO + (bh * N + i) * d;
      float* dq = dQ + (bh * N + i) * d;
      const int64_t visible = visible_keys(p, i);
      /* in the forward pass this was: o = sum_j P_j v_j, P = softmax(s), s_j = scale q.k_j;
       * so now: dv_j += P_j do; dP_j = do.v_j; dS_j = P_j (dP_j - D) with D = do.o;
       * dq = scale sum_j dS_j k_j; dk_j += scale dS_j q. */
      const float D = dot(do_, O + (bh * N + i) * d, d);
      memset(dq, 0, (size_t)d * sizeof(float));
      for (int64_t j = 0; j < visible; ++j) {
        P[j] = expf(p->scale * dot(q, k + j * d, d) - LSE[bh * N + i]);
        dP[j] = dot(do_, v + j * d, d);
      }
      for (int64_t j = 0; j < visible; ++j) {
        const float dS = P[j] * (dP[j] - D);
        for (int64_t c = 0; c < d; ++c) {
          dv[j * d + c] += P[j] * do_[c];
          dq[c] += p->scale * dS * k[j * d + c];
          dk[j * d + c] += p->scale * dS * q[c];
        }
      }
    }
  }
}
