#pragma once
// Philox 4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11),
// the counter-based generator dropout masks come from, and the mask itself. Header-only and free of
// the standard library beyond <cstdint>, so that host C++ and CUDA device code compile the same
// lines and draw bit-identical masks: under nvcc every function is __host__ __device__.
//
// A dropout mask is keyed by (seed, offset, element): the seed is the run's, the offset tells layers
// (and passes that must differ) apart, and the element is the index of an entry of one layer's
// [B·H, N, N_k] attention weights, (h·N + i)·N_k + j. One Philox block of four 32-bit words covers
// four consecutive elements: counter = (element / 4 as two words, offset as two words), key = the
// seed's two words, and element e takes word e % 4. An element is kept when its word is at least
// p·2^32, so it is kept with probability 1 − p (to within 2^-32), and scaled by 1/(1 − p).
#include <cstdint>

#if defined(__CUDACC__)
#define FLASHBENCH_HOST_DEVICE __host__ __device__
#else
#define FLASHBENCH_HOST_DEVICE
#endif

namespace flashbench::philox {

struct Block {
  uint32_t word[4];
};

// One Philox 4x32 round on `x` with key (k0, k1).
FLASHBENCH_HOST_DEVICE inline Block single_round(const Block& x, uint32_t k0, uint32_t k1) {
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // the multipliers of Philox 4x32
  const uint64_t product0 = kM0 * x.word[0], product1 = kM1 * x.word[2];
  const uint32_t hi0 = uint32_t(product0 >> 32), lo0 = uint32_t(product0);
  const uint32_t hi1 = uint32_t(product1 >> 32), lo1 = uint32_t(product1);
  return Block{{hi1 ^ x.word[1] ^ k0, lo1, hi0 ^ x.word[3] ^ k1, lo0}};
}

// Philox 4x32 with 10 rounds: the key is bumped by the Weyl constants before every round but the first.
FLASHBENCH_HOST_DEVICE inline Block philox4x32_10(Block counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // golden ratio, sqrt(3) − 1
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    counter = single_round(counter, key0, key1);
  }
  return counter;
}

// The dropout mask of one layer: which entries of its [B·H, N, N_k] weights are kept.
struct DropoutMask {
  uint64_t seed = 0;
  uint64_t offset = 0;   // the layer (an index the caller chooses, the same in forward and backward)
  uint32_t threshold = 0;  // ⌊p·2^32⌋: a word below it drops its element
  float scale = 1.0f;      // 1/(1 − p), what a kept element is multiplied by

  FLASHBENCH_HOST_DEVICE bool active() const { return threshold != 0; }

  // The four words of the block holding element `e`.
  FLASHBENCH_HOST_DEVICE Block block(uint64_t e) const {
    const uint64_t index = e / 4;
    return philox4x32_10(Block{{uint32_t(index), uint32_t(index >> 32), uint32_t(offset), uint32_t(offset >> 32)}},
                         uint32_t(seed), uint32_t(seed >> 32));
  }
  FLASHBENCH_HOST_DEVICE bool keeps(uint64_t e) const { return block(e).word[e % 4] >= threshold; }
  // What the weight of element e is multiplied by: 1/(1 − p) where kept, 0 where dropped.
  FLASHBENCH_HOST_DEVICE float factor(uint64_t e) const { return keeps(e) ? scale : 0.0f; }
  // factor(first + k) for k < count, one Philox block per four elements.
  FLASHBENCH_HOST_DEVICE void factors(uint64_t first, int64_t count, float* out) const {
    uint64_t e = first;
    const uint64_t end = first + uint64_t(count);
    while (e < end) {
      const Block words = block(e);
      for (uint64_t lane = e % 4; lane < 4 && e < end; ++lane, ++e) out[e - first] = words.word[lane] >= threshold ? scale : 0.0f;
    }
  }
};

// The mask for dropout probability p (0 ≤ p < 1; p = 0 keeps everything) keyed by seed and offset.
FLASHBENCH_HOST_DEVICE inline DropoutMask make_dropout_mask(double p, uint64_t seed, uint64_t offset) {
  DropoutMask mask;
  mask.seed = seed;
  mask.offset = offset;
  const double threshold = p * 4294967296.0;  // p·2^32
  mask.threshold = threshold >= 4294967295.0 ? 0xFFFFFFFFu : uint32_t(threshold);
  mask.scale = p > 0 ? float(1.0 / (1.0 - p)) : 1.0f;
  return mask;
}

}  // namespace flashbench::philox
