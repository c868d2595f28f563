#pragma once
// The sm_90a kernels' shared memory: its aligned start, generic pointers into it, and the ring of
// stages through which the copy engine streams tiles to the block. Included by flash_wgmma.cu alone:
// its names live in that file's anonymous namespace, as the kernels do.
#include <cstdint>

#include "../hopper.cuh"

namespace flashbench::cuda {
namespace {

using namespace hopper;

// The block's dynamic shared memory (every kernel's: one symbol). The kernels' code names it
// directly rather than holding a pointer to it, which keeps its address a constant to the compiler.
extern __shared__ unsigned char shared_raw[];

// The dynamic shared memory, from its first 1024-byte boundary (the swizzle pattern's period).
__device__ __forceinline__ uint32_t aligned_shared_base(const unsigned char* raw) {
  return (shared_address(raw) + 1023u) & ~1023u;
}
// The generic pointer to shared `address`, given the dynamic shared memory's start `raw`.
__device__ __forceinline__ unsigned char* generic_at(unsigned char* raw, uint32_t address) {
  return raw + (address - shared_address(raw));
}

// A ring of kStages tile buffers that the copy engine fills: stage s completes on the mbarrier at
// full + 8s, and released + 4s counts the block's warps done with it. Tile i goes to stage
// i % kStages, and the warp that counts last refills the stage with tile i + kStages. The counts of
// consecutive uses never mix: a warp counts a stage's next use only after waiting for the tile that
// the last count of this use issued.
template <int kStages, int kWarps>
struct StageRing {
  uint32_t full;
  uint32_t released;
  int stage = 0;
  uint32_t phase = 0;  // of the current stage's mbarrier in its current use

  __device__ __forceinline__ uint32_t barrier(int s) const { return full + 8 * s; }
  // By one thread, before the block barrier that publishes them: each stage's mbarrier counting
  // `arrivals` a phase, its count of warps 0.
  __device__ __forceinline__ void init(unsigned char* shared_raw, uint32_t arrivals) const {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(barrier(s), arrivals);
      *reinterpret_cast<uint32_t*>(shared_raw + (released + 4 * s - shared_address(shared_raw))) = 0;
    }
  }
  // The current stage's tile is in shared memory.
  __device__ __forceinline__ void wait() const { mbarrier_wait(barrier(stage), phase); }
  // By lane 0 of a warp done with the current stage: true for the last of the block's kWarps.
  __device__ __forceinline__ bool count_done() const {
    return count_in(released + 4 * stage) % kWarps == kWarps - 1;
  }
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

}  // namespace
}  // namespace flashbench::cuda
