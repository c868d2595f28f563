// CudaDevice::occupy's kernel: one thread that spins on the GPU's global timer, so that the work
// queued after it on the stream waits behind it while the host queues the rest.
#include "flashbench/cuda/device_memory.hpp"
#include "flashbench/cuda/kernels.hpp"

namespace flashbench::cuda {

namespace {

// %globaltimer: the GPU's nanosecond clock, the same on every SM (its resolution is a microsecond or
// better, plenty for spins of milliseconds); clock64 would count SM cycles, whose rate varies with
// the clocks.
__device__ uint64_t global_timer_ns() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

__global__ void spin_kernel(uint64_t nanoseconds) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < nanoseconds) {
  }
}

}  // namespace

void spin(double milliseconds, cudaStream_t stream) {
  if (milliseconds <= 0) return;
  spin_kernel<<<1, 1, 0, stream>>>(uint64_t(milliseconds * 1e6));
  check_cuda(cudaGetLastError(), "spin_kernel");
}

}  // namespace flashbench::cuda
