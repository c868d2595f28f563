#pragma once
// The CUDA device's implementations and model parameters, as far as they need no GPU. Internal to
// src/cuda and free of CUDA headers: registration.cpp (every build) defines the costs and the
// registration, so that `model --backend cuda` and `fit` answer on a machine without CUDA; what
// touches the GPU is defined either by attention.cpp and device.cpp (built with CUDA) or by
// unavailable.cpp (built without).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flashbench/harness/device.hpp"
#include "flashbench/harness/implementation.hpp"

namespace flashbench::cuda {

// The workspace every memory space lends cuBLAS (tag workspace, alive while the space is). [bytes]
inline constexpr int64_t kBlasWorkspaceBytes = int64_t{32} << 20;

// The L2 size the model assumes when there is no GPU to ask (`model` on a CPU machine): the H200's
// 60 MiB, the GPU this benchmark is mostly run on. It only decides the number of input sets. [bytes]
inline constexpr int64_t kAssumedL2Bytes = int64_t{60} << 20;

// How many input sets (Q, K, V of every layer and dO) the timing loop rotates through so that consecutive samples do not
// find their inputs in an L2 cache of `l2_bytes`: enough to exceed 2× L2, at most 4.
int64_t input_sets(const Problem& problem, int64_t l2_bytes);

// The model's parameters of a GPU with an L2 of `l2_bytes`: one "thread" (workspace is per layer
// call, not per worker), the input sets, the cuBLAS workspace, gradients in the storage dtype.
ModelParams model_params(const Problem& problem, int64_t l2_bytes);

// One variant's layer on the GPU: cuBLAS and row kernels for the materialising variants (standard,
// v1, checkpoint), fused tiled kernels for v2. Shapes as in kernels.hpp: Q, O, dO, dQ [BH, N, d] and
// K, V, dK, dV [BG, N_k, d], all in the storage dtype (the gradient dtype on the GPU).
class CudaAttention final : public Implementation {
 public:
  // Which tensor-core kernels v2 runs in bf16/fp16 (the other variants have one implementation):
  // the newest for the GPU at hand (wgmma on Hopper), the same storing dK and dV in the storage dtype
  // where they can (newest_stored_keys: a candidate beside `v2`, flash_stores_key_gradients), or the
  // earlier mma.sync kernels everywhere.
  enum class Kernels { newest, newest_stored_keys, mma_sync };

  CudaAttention(Variant variant, std::string summary);
  CudaAttention(Variant variant, std::string name, Kernels kernels, std::string summary);

  std::string_view name() const override { return name_; }
  Variant variant() const override { return variant_; }
  std::string_view summary() const override { return summary_; }
  std::optional<std::string> unsupported(const Problem& problem) const override;
  LayerCosts costs(const Problem& problem, const ModelParams& params) const override;

  void forward(LayerCall& call, const LayerInputs& in, void* O, KeptTensors& kept) override;
  void backward(LayerCall& call, const LayerInputs& in, const void* O, const void* dO, KeptTensors& kept,
                const LayerGradients& gradients) override;

 private:
  std::string name_;
  Variant variant_;
  Kernels kernels_ = Kernels::newest;
  std::string summary_;
};

// Whether a v2 implementation's backward stores dK and dV itself for `problem` (no fp32 accumulators
// for them): asked for (newest_stored_keys) and possible (flash_stores_key_gradients, G = H on a
// Hopper GPU). A build without CUDA answers false (unavailable.cpp).
bool stores_key_gradients(CudaAttention::Kernels kernels, const Problem& problem);

// standard, v1, v2, checkpoint (each variant's default, in that order), then v2.mma, v2.stored, then
// cudnn (v2 by cuDNN).
std::vector<std::unique_ptr<Implementation>> implementations();

// ---- defined by device.cpp (with CUDA) or unavailable.cpp (without) ----

// The L2 size of GPU `index` when this build can ask one, nothing otherwise. [bytes]
std::optional<int64_t> l2_bytes_of(int index);

// The GPU options.index; throws UsageError when there is none (or no CUDA in this build).
std::unique_ptr<Device> open_device(const DeviceOptions& options);

}  // namespace flashbench::cuda
