#include "flashbench/cuda/device_memory.hpp"

#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "flashbench/errors.hpp"

namespace flashbench::cuda {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw RuntimeFailure(fmt::format("CUDA error in {}: {}", what, cudaGetErrorString(status)));
}

DeviceAllocator::DeviceAllocator(MemoryLedger& ledger, int device, cudaStream_t stream)
    : ledger_(&ledger), stream_(stream) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  check_cuda(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
  // Keep freed memory reserved between iterations, so repeated runs reuse it as a framework would.
  uint64_t keep_all = std::numeric_limits<uint64_t>::max();
  check_cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all),
             "cudaMemPoolSetAttribute(ReleaseThreshold)");
}

DeviceAllocator::~DeviceAllocator() {
  cudaStreamSynchronize(stream_);
  cudaMemPoolDestroy(pool_);
}

void* DeviceAllocator::allocate(Tag tag, int64_t bytes) {
  if (bytes < 0) throw RuntimeFailure(fmt::format("negative allocation of {} bytes", bytes));
  if (ledger_->would_exceed_limit(bytes))
    throw OutOfMemory(fmt::format("{} bytes for '{}' exceed the memory limit of {} bytes", bytes,
                                  to_string(tag), ledger_->limit_bytes()));
  void* pointer = nullptr;
  const cudaError_t status =
      cudaMallocFromPoolAsync(&pointer, static_cast<size_t>(bytes == 0 ? 1 : bytes), pool_, stream_);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed for it
    throw OutOfMemory(fmt::format("the GPU refused {:.2f} GiB for '{}' with {:.2f} GiB tracked live",
                                  double(bytes) / double(1 << 30), to_string(tag),
                                  double(ledger_->live().total()) / double(1 << 30)));
  }
  check_cuda(status, "cudaMallocFromPoolAsync");
  ledger_->record_allocation(tag, bytes);
  return pointer;
}

void DeviceAllocator::release(void* pointer, Tag tag, int64_t bytes) noexcept {
  cudaFreeAsync(pointer, stream_);
  ledger_->record_release(tag, bytes);
}

int64_t DeviceAllocator::pool_used_high() const {
  uint64_t value = 0;
  check_cuda(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &value),
             "cudaMemPoolGetAttribute(UsedMemHigh)");
  return static_cast<int64_t>(value);
}

void DeviceAllocator::reset_pool_high() {
  uint64_t zero = 0;  // the only value the attribute accepts: restart from what is in use now
  check_cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero),
             "cudaMemPoolSetAttribute(UsedMemHigh)");
}

void DeviceAllocator::trim() {
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  check_cuda(cudaMemPoolTrimTo(pool_, 0), "cudaMemPoolTrimTo");
}

}  // namespace flashbench::cuda
