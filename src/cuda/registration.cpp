// The CUDA device's registration, its implementations' per-layer costs and its model parameters:
// compiled into every build (no CUDA headers), so that the model of the GPU answers anywhere.
#include <algorithm>

#include "attention.hpp"
#include "cudnn_attention.hpp"
#include "flashbench/harness/registry.hpp"

namespace flashbench {
namespace cuda {

int64_t input_sets(const Problem& problem, int64_t l2_bytes) {
  const int64_t set_bytes = input_bytes(problem);
  const int64_t wanted = (2 * l2_bytes + set_bytes - 1) / std::max<int64_t>(set_bytes, 1);
  return std::clamp<int64_t>(wanted, 1, 4);
}

ModelParams model_params(const Problem& problem, int64_t l2_bytes) {
  return ModelParams{.threads = 0,  // no per-thread workspace on the GPU
                     .input_sets = input_sets(problem, l2_bytes),
                     .persistent_workspace_bytes = kBlasWorkspaceBytes,
                     .gradient_element_bytes = element_bytes(problem.dtype)};
}

CudaAttention::CudaAttention(Variant variant, std::string summary)
    : name_(to_string(variant)), variant_(variant), summary_(std::move(summary)) {}

CudaAttention::CudaAttention(Variant variant, std::string name, Kernels kernels, std::string summary)
    : name_(std::move(name)), variant_(variant), kernels_(kernels), summary_(std::move(summary)) {}

// With s the bytes of one [B,H,N,N] matrix in the storage dtype, r of one [B,H,N] fp32 vector and
// a of one [B,H,N,d] fp32 tensor, what attention.cpp allocates inside one layer call:
//   forward   standard 0 (S is computed into the kept P), v1 s (P for O = P·V, S being kept),
//             v2 0, checkpoint s (P)
//   backward  standard s (dP, then dS in place), v1 s (dP; P is recomputed over the kept S),
//             v2 r + a (D = rowsum(dO ∘ O) and the fp32 accumulator of dQ + dK + dV),
//             checkpoint 2s (the recomputed P, and dP)
// dX_i itself is the stack's, in the storage dtype: no extra gradient buffers.
LayerCosts CudaAttention::costs(const Problem& problem, const ModelParams&) const {
  const int64_t s = problem.score_elements() * element_bytes(problem.dtype);
  const int64_t r = problem.row_elements() * int64_t{4};
  const int64_t a = problem.qkv_elements() * int64_t{4};
  switch (variant_) {
    case Variant::standard: return {.forward_workspace_bytes = 0, .backward_workspace_bytes = s};
    case Variant::v1: return {.forward_workspace_bytes = s, .backward_workspace_bytes = s};
    case Variant::v2: return {.forward_workspace_bytes = 0, .backward_workspace_bytes = r + a};
    case Variant::checkpoint: return {.forward_workspace_bytes = s, .backward_workspace_bytes = 2 * s};
  }
  return {};
}

std::vector<std::unique_ptr<Implementation>> implementations() {
  std::vector<std::unique_ptr<Implementation>> all;
  all.push_back(std::make_unique<CudaAttention>(
      Variant::standard, "standard: S and P [B,H,N,N] through cuBLAS, P kept for backward"));
  all.push_back(std::make_unique<CudaAttention>(
      Variant::v1, "v1: S and the row statistics m, l kept; P recomputed from them in backward (cuBLAS)"));
  all.push_back(std::make_unique<CudaAttention>(
      Variant::v2, "v2: fused tiled kernels (bf16/fp16: wgmma on Hopper, mma.sync elsewhere; fp32 SIMT), O and "
                   "LSE kept"));
  all.push_back(std::make_unique<CudaAttention>(
      Variant::checkpoint, "checkpoint: nothing kept; S and P recomputed in backward (cuBLAS)"));
  all.push_back(std::make_unique<CudaAttention>(
      Variant::v2, "v2.mma", CudaAttention::Kernels::mma_sync,
      "v2 with the earlier mma.sync kernels on every GPU (FlashAttention-2 style, 8 warps per block)"));
  all.push_back(std::make_unique<CudnnAttention>());  // after v2: `--impl v2` stays flashbench's own
  return all;
}

}  // namespace cuda

void register_device_cuda(Registry& registry) {
  registry.add(DeviceEntry{
      .name = "cuda",
      .summary = "an NVIDIA GPU through CUDA: cuBLAS and fused kernels",
      .open = cuda::open_device,
      .offline_params = [](const Problem& problem, const DeviceOptions& options) {
        return cuda::model_params(problem, cuda::l2_bytes_of(options.index).value_or(cuda::kAssumedL2Bytes));
      },
      .implementations = cuda::implementations,
      .measure_peak = nullptr,  // no measured ceilings: rates stay absolute
      .nominal_flop_rate = 2e14,  // an H100/H200's bf16 attention: 200-400 TFLOP/s forward
  });
}

}  // namespace flashbench
