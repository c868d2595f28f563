#pragma once
// The sm_90a kernels' dropout keep flags, drawn into shared memory from the layer's Philox mask
// (philox.hpp) a tile at a time: as bytes (the forward kernel, backward_kernel) or as bits
// (wide_backward_kernel). Included by flash_wgmma.cu alone: its names live in that file's
// anonymous namespace, as the kernels do.
#include <cstdint>

#include "../flash_layer.cuh"

namespace flashbench::cuda {
namespace {

// Dropout keep flags of kRows query rows × kKeys consecutive keys into keep [kRows][kLd] (1 = kept),
// drawn by the kThreads threads of a block, one Philox block (four consecutive elements of a row) per
// work item: a row whose first element is not 4-aligned spans kKeys/4 + 1 blocks. Row r's first
// element in the layer's [BH, N, N_k] weights is first_element + r·N_k.
template <int kRows, int kKeys, int kLd, int kThreads>
__device__ __forceinline__ void draw_keep_flags(const philox::DropoutMask& dropout, uint64_t first_element,
                                                int64_t seq_k, unsigned char* keep, int thread) {
  constexpr int kBlocksPerRow = kKeys / 4 + 1;
  for (int item = thread; item < kRows * kBlocksPerRow; item += kThreads) {
    const int row = item / kBlocksPerRow, block = item % kBlocksPerRow;
    const uint64_t first = first_element + uint64_t(row) * uint64_t(seq_k);
    const uint64_t block_start = (first / 4 + uint64_t(block)) * 4;
    if (block_start >= first + kKeys) continue;  // an aligned row needs kKeys/4 blocks, not one more
    const philox::Block words = dropout.block(block_start);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t key = int64_t(block_start + w) - int64_t(first);
      if (key >= 0 && key < kKeys) keep[row * kLd + key] = philox_word(words, w) >= dropout.threshold ? 1 : 0;
    }
  }
}

// Dropout keep flags of 64 query rows × 64 consecutive keys as bits: bit k % 32 of bits[2·row + k/32]
// is set where key k is kept. By 128 threads, one word each (its 32 keys span 8 or 9 Philox blocks
// of four consecutive elements), so no two threads write one word. Row r's first element in the
// layer's [BH, N, N_k] weights is first_element + r·N_k.
__device__ __forceinline__ void draw_keep_bits(const philox::DropoutMask& dropout, uint64_t first_element,
                                               int64_t seq_k, uint32_t* bits, int thread) {
  const int row = thread / 2, half = thread % 2;
  const uint64_t first = first_element + uint64_t(row) * uint64_t(seq_k) + 32 * half;
  uint32_t word = 0;
  for (uint64_t block_start = first / 4 * 4; block_start < first + 32; block_start += 4) {
    const philox::Block words = dropout.block(block_start);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t key = int64_t(block_start + w) - int64_t(first);
      if (key >= 0 && key < 32 && philox_word(words, w) >= dropout.threshold) word |= 1u << key;
    }
  }
  bits[thread] = word;
}

}  // namespace
}  // namespace flashbench::cuda
