#pragma once
// The sm_90a kernels' epilogues: what leaves the block once its mainloop is done (the forward's O and
// LSE rows, the backwards' dK and dV stored, or added into their fp32 accumulators). Included by
// flash_wgmma.cu alone: its names live in that file's anonymous namespace, as the kernels do.
#include <cstdint>

#include "../flash_common.cuh"
#include "plans.cuh"

namespace flashbench::cuda {
namespace {

// forward_kernel: this thread's rows row[0], row[1] (those below N) of O = o / l, times 1/(1 − p)
// with dropout, into O [BH, N, kDim] from `out` (the head's first row), and their LSE = m + log2(l)
// in natural log into lse [BH, N] (+∞ for a row that sees no key, whose O is 0). o: the warpgroup's
// accumulator [64 rows × D], register 4c + 2h + e its row row[h], column 8c + 2t + e; m: the rows'
// running max (log2 units); l: this thread's partial sums of their weights, summed over the four
// threads of each row here.
template <class T, int D, int kDim, bool kDropout>
__device__ __forceinline__ void store_forward_rows(const float (&o)[D / 2], const float (&m)[2], float (&l)[2],
                                                   const int64_t (&row)[2], int64_t seq, T* out, float* lse,
                                                   int64_t head, const philox::DropoutMask& dropout, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (row[h] >= seq) continue;
    // 1/l, and with dropout 1/(1 − p) too; a row that sees no key: O = 0.
    const float inverse = l[h] > 0.0f ? (kDropout ? dropout.scale : 1.0f) / l[h] : 0.0f;
    T* out_row = out + row[h] * kDim;
#pragma unroll
    for (int c = 0; c < kDim / 8; ++c)
      *reinterpret_cast<uint32_t*>(out_row + 8 * c + 2 * t) =
          pack2<T>(o[4 * c + 2 * h] * inverse, o[4 * c + 2 * h + 1] * inverse);
    if (t == 0) lse[head * seq + row[h]] = l[h] > 0.0f ? (m[h] + log2f(l[h])) * kLn2 : INFINITY;
  }
}

// Where a backward kernel leaves its block's dK and dV: stored in the storage dtype T straight into
// the layer's dK and dV [BG, N_k, kDim] where `dk` is set (the host sets it only where one block holds
// the whole sum over queries: G = H, the grid not split over z), else added into the fp32
// accumulators [BG, N_k, kDim] that the host zeroed and converts afterwards.
template <class T>
struct KeyGradientOut {
  float* dk_accumulator;
  float* dv_accumulator;
  T* dk;  // null: add into the accumulators
  T* dv;
};

// One gradient of this thread's keys key_local[0], key_local[1] (those inside N_k, key_inside) of
// the block's keys from k0, times `factor`: stored in T into `stored` [BG, N_k, kDim] where that is
// set (see KeyGradientOut), else added into `accumulator` [BG, N_k, kDim] (fp32; where the grid splits
// the group over gridDim.z, other blocks add their query heads' shares to the same rows). A pair of
// columns per store or reduction (red.global.add.v2.f32, 8-byte aligned: kDim and 2t even). grad: the
// warpgroup's accumulator [64 keys × D], register 4c + 2h + e its key key_local[h], column
// 8c + 2t + e. backward_kernel writes dK (factor `scale`) and dV (factor 1) of its warpgroup's keys;
// wide_backward_kernel's warpgroup 0 dV, warpgroup 1 dK (kDim = D).
template <class T, int D, int kDim>
__device__ __forceinline__ void write_key_gradient(const float (&grad)[D / 2], T* stored, float* accumulator,
                                                   float factor, int64_t kv_head, int64_t seq_k, int64_t k0,
                                                   const int (&key_local)[2], const bool (&key_inside)[2], int t) {
  // The choice outside the loops: inside them it cost the d = 256 dropout kernel 4 bytes of spill.
  if (stored != nullptr) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!key_inside[h]) continue;
      T* out = stored + (kv_head * seq_k + k0 + key_local[h]) * kDim;
#pragma unroll
      for (int c = 0; c < kDim / 8; ++c)
        *reinterpret_cast<uint32_t*>(out + 8 * c + 2 * t) =
            pack2<T>(factor * grad[4 * c + 2 * h], factor * grad[4 * c + 2 * h + 1]);
    }
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!key_inside[h]) continue;
    float* out = accumulator + (kv_head * seq_k + k0 + key_local[h]) * kDim;
#pragma unroll
    for (int c = 0; c < kDim / 8; ++c)
      atomicAdd(reinterpret_cast<float2*>(out + 8 * c + 2 * t),
                make_float2(factor * grad[4 * c + 2 * h], factor * grad[4 * c + 2 * h + 1]));
  }
}

}  // namespace
}  // namespace flashbench::cuda
