#pragma once
// Device memory through the same MemoryLedger as the CPU backend: every buffer comes from one
// dedicated, stream-ordered cudaMemPool and is recorded under its tag. The pool's own high-water
// mark (cudaMemPoolAttrUsedMemHigh) is the operating-system-side cross-check of the ledger's peak.
#include <cstdint>
#include <utility>

#include <cuda_runtime_api.h>

#include "flashbench/memory.hpp"

namespace flashbench::cuda {

// Throws RuntimeFailure naming `what` when `status` is not cudaSuccess.
void check_cuda(cudaError_t status, const char* what);

class DeviceAllocator {
 public:
  DeviceAllocator(MemoryLedger& ledger, int device, cudaStream_t stream);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Stream-ordered allocation from the pool; throws OutOfMemory when the ledger's limit or the
  // device refuses it.
  void* allocate(Tag tag, int64_t bytes);
  void release(void* pointer, Tag tag, int64_t bytes) noexcept;

  MemoryLedger& ledger() const { return *ledger_; }
  cudaStream_t stream() const { return stream_; }

  int64_t pool_used_high() const;  // [bytes] since the last reset_pool_high()
  void reset_pool_high();
  // Hands reserved but unused pool memory back to the device (between variants, after an OOM).
  void trim();

 private:
  MemoryLedger* ledger_;
  cudaStream_t stream_;
  cudaMemPool_t pool_ = nullptr;
};

// An owning, tagged, move-only device buffer of `bytes` bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator& allocator, Tag tag, int64_t bytes)
      : allocator_(&allocator), tag_(tag), bytes_(bytes), data_(allocator.allocate(tag, bytes)) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer(std::move(other)).swap(*this);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void reset() noexcept {
    if (data_) allocator_->release(data_, tag_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return data_; }
  float* as_float() const { return static_cast<float*>(data_); }
  int64_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(allocator_, other.allocator_);
    std::swap(tag_, other.tag_);
    std::swap(bytes_, other.bytes_);
    std::swap(data_, other.data_);
  }
  DeviceAllocator* allocator_ = nullptr;
  Tag tag_ = Tag::workspace;
  int64_t bytes_ = 0;
  void* data_ = nullptr;
};

}  // namespace flashbench::cuda
