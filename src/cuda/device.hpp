#pragma once
// The CUDA device: one GPU, one stream on which everything is ordered (kernels, cuBLAS, every
// allocation and free, copies, timing events), one cuBLAS handle. Internal to src/cuda; needs CUDA.
#include <memory>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "flashbench/cuda/device_memory.hpp"
#include "flashbench/harness/device.hpp"
#include "flashbench/harness/implementation.hpp"

namespace flashbench::cuda {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index);  // GPU `index`, which must exist
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string_view name() const override { return "cuda"; }

  // A fresh pool that lends cuBLAS its workspace while it is open.
  std::unique_ptr<MemorySpace> open_space(MemoryLedger& ledger) override;
  std::optional<int64_t> available_bytes() const override;  // the GPU's free memory
  bool shares_host_memory() const override { return false; }
  ModelParams model_params(const Problem& problem) const override;

  std::unique_ptr<PhaseTimer> timer() override;  // CUDA events on the stream
  void* native_stream() const override { return stream_; }  // a plugin's calls queue on the same stream
  void synchronize() override;
  void flush_caches() override;  // overwrites a buffer of twice the L2
  // Spins a one-thread kernel on the stream: the timed region queued next starts on a busy GPU,
  // whatever the host takes to queue it.
  void occupy(double milliseconds) override;
  int64_t cache_flush_bytes() const override;

  void fill_normal(Dtype dtype, void* dst, int64_t count, uint64_t seed) override;
  void upload(std::span<const float> host, Dtype dtype, void* dst) override;
  std::vector<float> download(const void* src, Dtype dtype, int64_t offset, int64_t count) override;
  Dtype gradient_dtype(const Problem& problem) const override { return problem.dtype; }

  void describe(nlohmann::ordered_json& meta) const override;  // meta["gpu"]
  void annotate(Row& row) const override;                      // row.device = the GPU's name
  std::optional<GpuState> gpu_state() const override;          // NVML, found by the GPU's PCI bus id
  void push_range(const std::string& name) override;  // NVTX (profiler_ranges.cpp)
  void pop_range() override;

  // What the implementations launch with.
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_->get(); }

 private:
  int64_t l2_bytes() const { return properties_.l2CacheSize; }

  int index_;
  cudaDeviceProp properties_{};
  std::string pci_bus_id_;           // "0000:19:00.0": how NVML, which ignores CUDA_VISIBLE_DEVICES, finds it
  mutable std::string nvml_missing_; // why gpu_state() read nothing, for meta.gpu.nvml
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<BlasHandle> blas_;
  void* flush_buffer_ = nullptr;  // for --cold: the device's own, outside every ledger
  unsigned flush_round_ = 0;
};

// The device of a layer call made by the layer stack on a CudaDevice (throws RuntimeFailure if not).
CudaDevice& cuda_device_of(const LayerCall& call);

}  // namespace flashbench::cuda
