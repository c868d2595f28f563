#pragma once
// What the sm_90a kernels do with wgmma accumulators in registers: read them back as the A operand
// of the next product, add P·V (or Pᵀ·dO, dSᵀ·Q) into accumulators wider than one product, and
// raise 2 to their powers. Included by flash_wgmma.cu alone: its names live in that file's
// anonymous namespace, as the kernels do.
#include <cstdint>

#include "../flash_common.cuh"
#include "../hopper.cuh"

namespace flashbench::cuda {
namespace {

using namespace hopper;

// Accumulator columns 16kk..16kk+15 (registers 8kk..8kk+7) as the A fragment of k-step kk.
template <class T, int kCount>
__device__ __forceinline__ void as_a_fragment(uint32_t (&a)[4], const float (&d)[kCount], int kk) {
  a[0] = pack2<T>(d[8 * kk + 0], d[8 * kk + 1]);
  a[1] = pack2<T>(d[8 * kk + 2], d[8 * kk + 3]);
  a[2] = pack2<T>(d[8 * kk + 4], d[8 * kk + 5]);
  a[3] = pack2<T>(d[8 * kk + 6], d[8 * kk + 7]);
}

// 2^x by the special-function unit alone (ex2.approx.ftz: relative error ~2⁻²², far below the
// 16-bit storage's 2⁻⁸..2⁻¹¹; tiny results flush to zero, as P's do after rounding anyway).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// o [64 rows × D] += a (k-step kk of the A operand, registers) · V's rows 16kk..16kk+15, all D
// columns, V MN-major from the descriptor of its column 0. One wgmma up to D = 128; beyond, the
// accumulator's column chunks of 128 (registers 64c..64c+63) and the rest each take their own
// product, reading V from the panel where the chunk's columns start.
template <class T, int D, class Tile>
__device__ __forceinline__ void add_product_by_column_chunks(float (&o)[D / 2], const uint32_t (&a)[4],
                                                             uint64_t v_desc, int kk) {
  if constexpr (D <= 128) {
    Wgmma<T, D>::template rs<1>(o, a, advance(v_desc, mn_major_step<Tile>(kk)), 1);
  } else {
    static_assert(D == 192 || D == 256, "head dims past 128: 192 or 256");
    Wgmma<T, 128>::template rs<1>(*reinterpret_cast<float(*)[64]>(&o[0]), a,
                                  advance(v_desc, mn_major_step<Tile>(kk)), 1);
    Wgmma<T, D - 128>::template rs<1>(*reinterpret_cast<float(*)[(D - 128) / 2]>(&o[64]), a,
                                      advance(v_desc, 2 * Tile::kPanelBytes + mn_major_step<Tile>(kk)), 1);
  }
}

}  // namespace
}  // namespace flashbench::cuda
