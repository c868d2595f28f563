#pragma once
// What the mma.sync and fp32 v2 kernels (flash_mma.cu, flash_simt.cu) need of a layer beyond its
// dtype and head dim (kernels.hpp): its extents as a kernel argument, and the dropout factors of its
// Philox mask (philox.hpp) drawn without indexing a block's words by a run-time value.
#include "flash_common.cuh"

namespace flashbench::cuda {

// The extents of kernels.hpp's LayerShape that the kernels read. Row positions are 32-bit in the
// kernels (fewer registers beside the tiles' accumulators); offsets into tensors stay 64-bit.
struct LayerExtents {
  static constexpr int64_t kMaxRows = int64_t(1) << 30;  // positions plus a tile stay below 2^31
  int seq;         // N query rows
  int seq_k;       // N_k key rows
  int group_size;  // r: query head h reads K/V head h / r
  bool causal;     // bottom-right: query i sees keys j ≤ i + seq_k − seq
  static LayerExtents of(const LayerShape& shape) {
    if (shape.seq > kMaxRows || shape.seq_k > kMaxRows)
      throw RuntimeFailure("v2 on CUDA supports at most 2^30 query or key rows");
    return {int(shape.seq), int(shape.seq_k), int(shape.group_size), shape.causal};
  }
};

// Word `lane` (0..3) of a Philox block; a run-time index into the array would put it in local memory.
__device__ __forceinline__ uint32_t philox_word(const philox::Block& words, int lane) {
  return lane == 0 ? words.word[0] : lane == 1 ? words.word[1] : lane == 2 ? words.word[2] : words.word[3];
}

// Dropout on two consecutive elements e, e + 1 of the layer's [BH, N, N_k] weights: each multiplied by
// 1/(1 − p) where kept, 0 where dropped; one Philox block unless the pair straddles two.
__device__ __forceinline__ void drop_pair(const philox::DropoutMask& mask, uint64_t e, float& first, float& second) {
  const philox::Block words = mask.block(e);
  const int lane = int(e % 4);
  first *= philox_word(words, lane) >= mask.threshold ? mask.scale : 0.0f;
  const uint32_t next = lane < 3 ? philox_word(words, lane + 1) : mask.block(e + 1).word[0];
  second *= next >= mask.threshold ? mask.scale : 0.0f;
}

// The dropout factors of a thread walking one row of weights key after key: elements e, e + 1, ...
// cost one Philox block per four.
class DropoutRowWalk {
 public:
  __device__ explicit DropoutRowWalk(const philox::DropoutMask& mask) : mask_(mask) {}
  // 1/(1 − p) where element e is kept, 0 where dropped.
  __device__ float factor(uint64_t e) {
    if (e / 4 != block_index_) {
      block_index_ = e / 4;
      words_ = mask_.block(e);
    }
    return philox_word(words_, int(e % 4)) >= mask_.threshold ? mask_.scale : 0.0f;
  }

 private:
  philox::DropoutMask mask_;
  uint64_t block_index_ = ~uint64_t(0);
  philox::Block words_{};
};

}  // namespace flashbench::cuda
