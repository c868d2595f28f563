#include "flashbench/cpu/storage16.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace flashbench::cpu {

namespace {

Half round_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return Half((bits >> 16) | 0x40);  // NaN stays a quiet NaN
  const uint32_t round_bit_and_ties = 0x7fffu + ((bits >> 16) & 1u);      // round to nearest even
  return Half((bits + round_bit_and_ties) >> 16);
}

float widen_bf16(Half h) { return std::bit_cast<float>(uint32_t(h) << 16); }

Half round_to_fp16(float x) { return std::bit_cast<Half>(static_cast<_Float16>(x)); }
float widen_fp16(Half h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

bool per_head(Variant variant) { return variant == Variant::standard || variant == Variant::v1; }

LayerShape one_head(const LayerShape& s) { return {1, s.seq, s.head_dim, s.causal, s.scale}; }

// fp32 elements of the temporary scores (and row statistics) one head computes or widens.
int64_t head_scores_elements(Variant variant, const LayerShape& s) {
  const int64_t N = s.seq;
  return variant == Variant::v1 ? N * N + 2 * N : N * N;
}

int64_t staging_elements(Variant variant, Pass pass, const LayerShape& s) {
  const int64_t tensor = s.heads_total * s.seq * s.head_dim;
  if (pass == Pass::forward) return 2 * tensor;                         // X, O
  return (variant == Variant::v2 ? 3 : 2) * tensor;                     // X, dO (, O)
}

}  // namespace

void round_to_storage(Dtype dtype, const float* x, Half* out, int64_t count) {
  if (dtype == Dtype::bf16) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = round_to_bf16(x[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = round_to_fp16(x[i]);
  }
}

void widen_from_storage(Dtype dtype, const Half* x, float* out, int64_t count) {
  if (dtype == Dtype::bf16) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = widen_bf16(x[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) out[i] = widen_fp16(x[i]);
  }
}

int64_t workspace16_elements(Variant variant, Pass pass, const LayerShape& s, const Tiling& t, int threads) {
  const int64_t inner = per_head(variant)
                            ? head_scores_elements(variant, s) + workspace_elements(variant, pass, one_head(s), t, threads)
                            : workspace_elements(variant, pass, s, t, threads);
  return staging_elements(variant, pass, s) + inner;
}

void forward16(Variant variant, Dtype dtype, const LayerShape& s, const Tiling& t, const Half* X, Half* O,
               KeptState16& kept, HostAllocator& allocator) {
  const int64_t BH = s.heads_total, N = s.seq, d = s.head_dim, tensor = BH * N * d;
  switch (variant) {
    case Variant::standard: kept.scores = HostBuffer<Half>(allocator, Tag::kept, BH * N * N); break;
    case Variant::v1:
      kept.scores = HostBuffer<Half>(allocator, Tag::kept, BH * N * N);
      kept.row_max = HostBuffer<float>(allocator, Tag::kept, BH * N);
      kept.row_sum = HostBuffer<float>(allocator, Tag::kept, BH * N);
      break;
    case Variant::v2:
    case Variant::checkpoint: break;
  }
  HostBuffer<float> staging(allocator, Tag::workspace, staging_elements(variant, Pass::forward, s));
  float* X32 = staging.data();
  float* O32 = X32 + tensor;
  widen_from_storage(dtype, X, X32, tensor);
  if (per_head(variant)) {
    for (int64_t h = 0; h < BH; ++h) {
      const float* X_head = X32 + h * N * d;
      KeptState head_kept;  // fp32 scores of this head, rounded into `kept` below
      forward(variant, one_head(s), t, X_head, X_head, X_head, O32 + h * N * d, head_kept, allocator, Tag::workspace);
      round_to_storage(dtype, head_kept.scores.data(), kept.scores.data() + h * N * N, N * N);
      if (variant == Variant::v1) {
        std::copy_n(head_kept.row_max.data(), N, kept.row_max.data() + h * N);
        std::copy_n(head_kept.row_sum.data(), N, kept.row_sum.data() + h * N);
      }
    }
  } else {
    KeptState layer_kept;  // v2: LSE, fp32 as every row statistic
    forward(variant, s, t, X32, X32, X32, O32, layer_kept, allocator, Tag::kept);
    kept.lse = std::move(layer_kept.lse);
  }
  round_to_storage(dtype, O32, O, tensor);
}

void backward16(Variant variant, Dtype dtype, const LayerShape& s, const Tiling& t, const Half* X, const Half* O,
                const Half* dO_half, const float* dO_float, KeptState16& kept, float* dQ, float* dK, float* dV,
                HostAllocator& allocator) {
  const int64_t BH = s.heads_total, N = s.seq, d = s.head_dim, tensor = BH * N * d;
  HostBuffer<float> staging(allocator, Tag::workspace, staging_elements(variant, Pass::backward, s));
  float* X32 = staging.data();
  float* dO32 = X32 + tensor;
  float* O32 = variant == Variant::v2 ? dO32 + tensor : nullptr;
  widen_from_storage(dtype, X, X32, tensor);
  if (dO_half) widen_from_storage(dtype, dO_half, dO32, tensor);
  else std::copy_n(dO_float, tensor, dO32);
  if (O32) widen_from_storage(dtype, O, O32, tensor);

  if (per_head(variant)) {
    for (int64_t h = 0; h < BH; ++h) {
      const int64_t offset = h * N * d;
      KeptState head_kept;  // this head's scores widened to fp32; backward releases them
      head_kept.scores = HostBuffer<float>(allocator, Tag::workspace, N * N);
      widen_from_storage(dtype, kept.scores.data() + h * N * N, head_kept.scores.data(), N * N);
      if (variant == Variant::v1) {
        head_kept.row_max = HostBuffer<float>(allocator, Tag::workspace, N);
        head_kept.row_sum = HostBuffer<float>(allocator, Tag::workspace, N);
        std::copy_n(kept.row_max.data() + h * N, N, head_kept.row_max.data());
        std::copy_n(kept.row_sum.data() + h * N, N, head_kept.row_sum.data());
      }
      const float* X_head = X32 + offset;
      backward(variant, one_head(s), t, X_head, X_head, X_head, nullptr, dO32 + offset, head_kept, dQ + offset,
               dK + offset, dV + offset, allocator);
    }
  } else {
    KeptState layer_kept;
    layer_kept.lse = std::move(kept.lse);
    backward(variant, s, t, X32, X32, X32, O32, dO32, layer_kept, dQ, dK, dV, allocator);
  }
  staging.reset();
  kept = KeptState16{};
}

}  // namespace flashbench::cpu
