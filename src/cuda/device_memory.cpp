#include "flashbench/cuda/device_memory.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"

namespace flashbench::cuda {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw RuntimeFailure(fmt::format("CUDA error in {}: {}", what, cudaGetErrorString(status)));
}

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw RuntimeFailure(fmt::format("cuBLAS error in {}: {}", what, cublasGetStatusString(status)));
}

// ---- BlasHandle ----

BlasHandle::BlasHandle(cudaStream_t stream) : stream_(stream) {
  check_blas(cublasCreate(&handle_), "cublasCreate");
  const cublasStatus_t bound = cublasSetStream(handle_, stream_);
  if (bound != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle_);
    check_blas(bound, "cublasSetStream");
  }
}

BlasHandle::~BlasHandle() { cublasDestroy(handle_); }

void BlasHandle::lend_workspace(void* workspace, int64_t bytes) {
  lent_.reserve(lent_.size() + 1);  // recording it below cannot fail once cuBLAS uses it
  // cublasSetStream resets the workspace to cuBLAS's own, so the stream is set first.
  const cublasStatus_t bound = cublasSetStream(handle_, stream_);
  const cublasStatus_t set = bound == CUBLAS_STATUS_SUCCESS ? cublasSetWorkspace(handle_, workspace, size_t(bytes)) : bound;
  if (set != CUBLAS_STATUS_SUCCESS) {
    use_latest();  // the workspace lent before stays in use
    check_blas(set, "cublasSetWorkspace");
  }
  lent_.emplace_back(workspace, bytes);
}

void BlasHandle::return_workspace(void* workspace) noexcept {
  auto lent = std::find_if(lent_.begin(), lent_.end(), [&](const auto& entry) { return entry.first == workspace; });
  if (lent == lent_.end()) return;
  const bool in_use = lent == lent_.end() - 1;
  lent_.erase(lent);
  if (in_use) use_latest();
}

void BlasHandle::use_latest() noexcept {
  // Back to cuBLAS's own workspace, then to the latest one still lent. Launches are ordered on the
  // one stream, so memory of a workspace given up may be freed on that stream right afterwards.
  cublasSetStream(handle_, stream_);
  if (!lent_.empty()) cublasSetWorkspace(handle_, lent_.back().first, size_t(lent_.back().second));
}

// ---- PoolSpace ----

PoolSpace::PoolSpace(MemoryLedger& ledger, int device, cudaStream_t stream, BlasHandle* blas,
                     int64_t blas_workspace_bytes)
    : MemorySpace(ledger), stream_(stream) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  check_cuda(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
  try {
    // Keep freed memory reserved between samples, so repeated passes reuse it as a framework's
    // caching allocator would; it goes back to the device when the pool is destroyed.
    uint64_t keep_all = std::numeric_limits<uint64_t>::max();
    check_cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all),
               "cudaMemPoolSetAttribute(ReleaseThreshold)");
    if (blas) {
      blas_workspace_ = RawBuffer(*this, Tag::workspace, blas_workspace_bytes);
      blas->lend_workspace(blas_workspace_.data(), blas_workspace_.bytes());
      blas_ = blas;
    }
  } catch (...) {
    close();  // no destructor runs for a constructor that throws
    throw;
  }
}

PoolSpace::~PoolSpace() { close(); }

void PoolSpace::close() noexcept {
  if (blas_) blas_->return_workspace(blas_workspace_.data());
  blas_ = nullptr;
  blas_workspace_.reset();
  // Every free was enqueued on the stream; once it has drained the pool holds no live allocation.
  cudaStreamSynchronize(stream_);
  if (pool_) cudaMemPoolDestroy(pool_);
  pool_ = nullptr;
}

void* PoolSpace::allocate(Tag tag, int64_t bytes) {
  check_limit(tag, bytes);
  void* pointer = nullptr;
  const cudaError_t status =
      cudaMallocFromPoolAsync(&pointer, static_cast<size_t>(bytes == 0 ? 1 : bytes), pool_, stream_);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the error, so that later calls are not blamed for it
    throw OutOfMemory(fmt::format("the GPU refused {:.2f} GiB for '{}' with {:.2f} GiB tracked live",
                                  double(bytes) / double(1 << 30), to_string(tag),
                                  double(ledger().live().total()) / double(1 << 30)));
  }
  check_cuda(status, "cudaMallocFromPoolAsync");
  ledger().record_allocation(tag, bytes, pointer);
  return pointer;
}

void PoolSpace::release(void* pointer, Tag tag, int64_t bytes) noexcept {
  cudaFreeAsync(pointer, stream_);
  ledger().record_release(tag, bytes, pointer);
}

void PoolSpace::reset_os_peak() {
  uint64_t zero = 0;  // the only value the attribute accepts: restart from what is in use now
  check_cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero),
             "cudaMemPoolSetAttribute(UsedMemHigh)");
}

std::optional<int64_t> PoolSpace::os_peak_bytes() const {
  uint64_t value = 0;
  check_cuda(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &value),
             "cudaMemPoolGetAttribute(UsedMemHigh)");
  return static_cast<int64_t>(value);
}

}  // namespace flashbench::cuda
