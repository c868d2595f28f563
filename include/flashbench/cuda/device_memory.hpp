#pragma once
// Device memory through the same MemoryLedger as every device: each memory space is one dedicated,
// stream-ordered cudaMemPool, every buffer recorded under its tag. The pool's own high-water mark
// (cudaMemPoolAttrUsedMemHigh) is the driver-side cross-check of the ledger's peak.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "flashbench/core/memory.hpp"

namespace flashbench::cuda {

// Throw RuntimeFailure naming `what` when the status is not success.
void check_cuda(cudaError_t status, const char* what);
void check_blas(cublasStatus_t status, const char* what);

// The device's one cuBLAS handle, bound to its stream. Every open memory space lends it a workspace
// from its own pool, so that cuBLAS's scratch memory is in the ledger (tag workspace); the most
// recently opened space still open is the one cuBLAS uses, cuBLAS's own workspace when none is.
class BlasHandle {
 public:
  explicit BlasHandle(cudaStream_t stream);
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }
  void lend_workspace(void* workspace, int64_t bytes);
  // Stops using `workspace`, before its memory is freed: cuBLAS goes back to the workspace lent
  // before it, or to its own.
  void return_workspace(void* workspace) noexcept;

 private:
  void use_latest() noexcept;
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_;
  std::vector<std::pair<void*, int64_t>> lent_;  // workspace, bytes; the last one is in use
};

// A memory space on one GPU: a fresh cudaMemPool, every allocation and release ordered on the
// device's one stream (so a buffer freed after a kernel that reads it is reused only after that
// kernel). With `blas`, the space lends cuBLAS a workspace of `blas_workspace_bytes` (tag
// workspace), allocated when it opens and released when it closes. A space must close before its
// device (stream, cuBLAS handle) goes away.
class PoolSpace final : public MemorySpace {
 public:
  PoolSpace(MemoryLedger& ledger, int device, cudaStream_t stream, BlasHandle* blas, int64_t blas_workspace_bytes);
  ~PoolSpace() override;

  // Throws OutOfMemory when the ledger's limit or the GPU refuses.
  void* allocate(Tag tag, int64_t bytes) override;
  void release(void* pointer, Tag tag, int64_t bytes) noexcept override;

  // The pool belongs to this space alone, so its used-memory high-water mark covers exactly what the
  // ledger counts (the cuBLAS workspace included) plus the pool's rounding of each size: it is
  // reported as is, comparable with the ledger's total peak.
  void reset_os_peak() override;
  std::optional<int64_t> os_peak_bytes() const override;

 private:
  void close() noexcept;  // cuBLAS off our workspace, workspace freed, stream drained, pool destroyed
  cudaStream_t stream_;
  cudaMemPool_t pool_ = nullptr;
  BlasHandle* blas_ = nullptr;
  RawBuffer blas_workspace_;
};

}  // namespace flashbench::cuda
