#include "flashbench/cpu/storage16.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace flashbench::cpu {

namespace {

bool per_head(Variant variant) { return variant == Variant::standard || variant == Variant::v1; }

// checkpoint's backward recomputes P one head at a time, as standard and v1 hold it: all heads at
// once would hold the layer's fp32 [B·H, N, N], about twice standard's 16-bit kept P (its forward
// holds a row block per thread only, and runs the layer whole).
bool recomputes_per_head(Variant variant, Pass pass) { return variant == Variant::checkpoint && pass == Pass::backward; }

// 16-bit storage runs square attention only, G = H and N_k = N (CpuAttention::unsupported says so).
LayerShape one_head(const LayerShape& s) { return {1, s.seq, s.head_dim, s.causal, s.scale, s.score_storage}; }

// fp32 elements of the temporary scores (and row statistics) one head computes or widens.
int64_t head_scores_elements(Variant variant, const LayerShape& s) {
  const int64_t N = s.seq;
  return variant == Variant::v1 ? N * N + 2 * N : N * N;
}

int64_t staging_elements(Variant variant, Pass pass, const LayerShape& s) {
  const int64_t tensor = s.heads_total * s.seq * s.head_dim;
  if (pass == Pass::forward) return 4 * tensor;                         // Q, K, V, O
  return (variant == Variant::v2 ? 5 : 4) * tensor;                     // Q, K, V, dO (, O)
}

}  // namespace

void round_to_storage(Dtype dtype, const float* x, Half* out, int64_t count) {
  // One loop per format, so that each vectorises without a test per element.
  if (dtype == Dtype::bf16) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = round_to_half(Dtype::bf16, x[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = round_to_half(Dtype::fp16, x[i]);
  }
}

void widen_from_storage(Dtype dtype, const Half* x, float* out, int64_t count) {
  if (dtype == Dtype::bf16) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = widen_half(Dtype::bf16, x[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = widen_half(Dtype::fp16, x[i]);
  }
}

int64_t workspace16_elements(Variant variant, Pass pass, const LayerShape& s, const Tiling& t, int threads) {
  int64_t inner = workspace_elements(variant, pass, s, t, threads);
  if (per_head(variant))
    inner = head_scores_elements(variant, s) + workspace_elements(variant, pass, one_head(s), t, threads);
  else if (recomputes_per_head(variant, pass))
    inner = workspace_elements(variant, pass, one_head(s), t, threads);  // its recomputed P inside
  return staging_elements(variant, pass, s) + inner;
}

void forward16(Variant variant, Dtype dtype, const LayerShape& layer, const Tiling& t, const Half* Q, const Half* K,
               const Half* V, Half* O, const KeptView16& kept, MemorySpace& space) {
  LayerShape s = layer;
  s.score_storage = dtype;
  const int64_t BH = s.heads_total, N = s.seq, d = s.head_dim, tensor = BH * N * d;
  Buffer<float> staging(space, Tag::workspace, staging_elements(variant, Pass::forward, s));
  float* Q32 = staging.data();
  float* K32 = Q32 + tensor;
  float* V32 = K32 + tensor;
  float* O32 = V32 + tensor;
  widen_from_storage(dtype, Q, Q32, tensor);
  widen_from_storage(dtype, K, K32, tensor);
  widen_from_storage(dtype, V, V32, tensor);
  if (per_head(variant)) {
    for (int64_t h = 0; h < BH; ++h) {
      const int64_t offset = h * N * d;
      // This head's fp32 scores and v1's statistics (workspace, as head_scores_elements counts
      // them), copied into `kept` below: the scores rounded, the statistics as they are.
      Buffer<float> scores(space, Tag::workspace, N * N);
      Buffer<float> row_max, row_sum;
      KeptView head{.scores = scores.data()};
      if (variant == Variant::v1) {
        row_max = Buffer<float>(space, Tag::workspace, N);
        row_sum = Buffer<float>(space, Tag::workspace, N);
        head.row_max = row_max.data();
        head.row_sum = row_sum.data();
      }
      forward(variant, one_head(s), t, Q32 + offset, K32 + offset, V32 + offset, O32 + offset, head, space);
      round_to_storage(dtype, scores.data(), kept.scores + h * N * N, N * N);
      if (variant == Variant::v1) {
        std::copy_n(row_max.data(), N, kept.row_max + h * N);
        std::copy_n(row_sum.data(), N, kept.row_sum + h * N);
      }
    }
  } else {
    forward(variant, s, t, Q32, K32, V32, O32, KeptView{.lse = kept.lse}, space);
  }
  round_to_storage(dtype, O32, O, tensor);
}

void backward16(Variant variant, Dtype dtype, const LayerShape& s, const Tiling& t, const Half* Q, const Half* K,
                const Half* V, const Half* O, const Half* dO, const KeptView16& kept, float* dQ, float* dK, float* dV,
                MemorySpace& space) {
  const int64_t BH = s.heads_total, N = s.seq, d = s.head_dim, tensor = BH * N * d;
  Buffer<float> staging(space, Tag::workspace, staging_elements(variant, Pass::backward, s));
  float* Q32 = staging.data();
  float* K32 = Q32 + tensor;
  float* V32 = K32 + tensor;
  float* dO32 = V32 + tensor;
  float* O32 = variant == Variant::v2 ? dO32 + tensor : nullptr;
  widen_from_storage(dtype, Q, Q32, tensor);
  widen_from_storage(dtype, K, K32, tensor);
  widen_from_storage(dtype, V, V32, tensor);
  widen_from_storage(dtype, dO, dO32, tensor);
  if (O32) widen_from_storage(dtype, O, O32, tensor);

  if (per_head(variant)) {
    for (int64_t h = 0; h < BH; ++h) {
      const int64_t offset = h * N * d;
      // This head's scores widened to fp32; v1 turns them into P in place, so its statistics are
      // copied rather than read where they are kept.
      Buffer<float> scores(space, Tag::workspace, N * N);
      widen_from_storage(dtype, kept.scores + h * N * N, scores.data(), N * N);
      Buffer<float> row_max, row_sum;
      KeptView head{.scores = scores.data()};
      if (variant == Variant::v1) {
        row_max = Buffer<float>(space, Tag::workspace, N);
        row_sum = Buffer<float>(space, Tag::workspace, N);
        std::copy_n(kept.row_max + h * N, N, row_max.data());
        std::copy_n(kept.row_sum + h * N, N, row_sum.data());
        head.row_max = row_max.data();
        head.row_sum = row_sum.data();
      }
      backward(variant, one_head(s), t, Q32 + offset, K32 + offset, V32 + offset, nullptr, dO32 + offset, head,
               dQ + offset, dK + offset, dV + offset, space);
    }
  } else if (recomputes_per_head(variant, Pass::backward)) {
    for (int64_t h = 0; h < BH; ++h) {
      const int64_t offset = h * N * d;
      backward(variant, one_head(s), t, Q32 + offset, K32 + offset, V32 + offset, nullptr, dO32 + offset, KeptView{},
               dQ + offset, dK + offset, dV + offset, space);
    }
  } else {
    backward(variant, s, t, Q32, K32, V32, O32, dO32, KeptView{.lse = kept.lse}, dQ, dK, dV, space);
  }
}

}  // namespace flashbench::cpu
