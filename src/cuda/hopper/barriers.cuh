#pragma once
// Named barriers (bar.sync / bar.arrive) of the sm_90a kernels, and each kernel's ids. A block has
// 16 (ids 0..15), id 0 being __syncthreads'; each kernel lists the ids it uses in an enum of its own
// and checks them against those 16. Included by flash_wgmma.cu alone: its names live in that file's
// anonymous namespace, as the kernels do.
#include "plans.cuh"

namespace flashbench::cuda {
namespace {

// The named barriers of a block (bar.sync's ids 0..15 on sm_90).
constexpr int kNamedBarriers = 16;
// Every kernel's ids 1 and 2: warpgroup w's own barrier is 1 + w (warpgroup_barrier).
constexpr int kWarpgroupBarrier = 1;

// Named barrier kId of kThreads threads: sync waits for all of them, arrive counts this thread in
// and goes on (a producer's hand-over: its stores before the arrive are seen after the consumers'
// sync). Warp-uniform, as bar.sync is.
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
// The same with the id chosen at run time (warp-uniform).
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}
template <int kThreads>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// Barrier of the 128 threads of one warpgroup (ids 1 and 2): blocks of two warpgroups only.
__device__ __forceinline__ void warpgroup_barrier(int warpgroup) {
  static_assert(kWarpgroupBarrier == 1, "the ids below");
  if (warpgroup == 0)
    asm volatile("bar.sync 1, %0;\n" ::"n"(kWarpgroupThreads) : "memory");
  else
    asm volatile("bar.sync 2, %0;\n" ::"n"(kWarpgroupThreads) : "memory");
}

// forward_kernel's: with dropout, each warpgroup's own orders its keep flags' draws and reads; the
// warpgroups share nothing else but the stage rings' mbarriers.
struct ForwardBarrier {
  enum : int {
    kBlock = 0,                      // __syncthreads: the mbarriers are initialised
    kWarpgroup = kWarpgroupBarrier,  // + w, two warpgroups (dropout's keep flags)
    kEnd = kWarpgroup + 2,
  };
};
static_assert(ForwardBarrier::kEnd <= kNamedBarriers, "forward_kernel: 16 named barriers a block");

// backward_kernel's. Without dropout (BackwardPlan::kDqDeferred) a warpgroup forms a tile's dQ from
// both halves of dS during the next tile, the halves handed over by warpgroup w arriving and the
// other waiting, b the dS buffer:
//   kDsStored + 2w + b: w's half of the dS in buffer b is stored (before the other's dQ);
//   kDsRead + 2w + b:   w's dQ products have read buffer b (before the other stores in it).
// One id per buffer: an id is reused two tiles on, after its waiter has passed its last use.
struct BackwardBarrier {
  enum : int {
    kBlock = 0,                      // __syncthreads: mbarriers initialised; with dropout at D = 128,
                                     // all of dSᵀ stored before dQ
    kWarpgroup = kWarpgroupBarrier,  // + w: a warpgroup's dQ staging, its keep flags
    kDsStored = kWarpgroup + 2,      // + 2w + b
    kDsRead = kDsStored + 4,         // + 2w + b
    kEnd = kDsRead + 4,
  };
};
static_assert(BackwardBarrier::kEnd <= kNamedBarriers, "backward_kernel: 16 named barriers a block");

// wide_backward_kernel's: the hand-overs between warpgroup 0 (Sᵀ, Pᵀ, dV) and 1 (dPᵀ, dSᵀ, dK).
struct WideBackwardBarrier {
  enum : int {
    kBlock = 0,                      // __syncthreads: the mbarriers are initialised
    kWarpgroup = kWarpgroupBarrier,  // + w: a warpgroup's dQ boxes, the exchange, its keep bits
    kPReady = kWarpgroup + 2,        // 0 arrives, 1 waits: Pᵀ of this tile is in the exchange
    kDsReady,                        // 1 arrives, 0 waits: dSᵀ of this tile is in its tile, Pᵀ read
    kDsFree,                         // 0 arrives, 1 waits: 0's dQ products of the last tile read dSᵀ
    kEnd,
  };
};
static_assert(WideBackwardBarrier::kEnd <= kNamedBarriers, "wide_backward_kernel: 16 named barriers a block");

}  // namespace
}  // namespace flashbench::cuda
