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

// With s the bytes of one [B,H,N,N_k] matrix in the storage dtype, r of one [B,H,N] fp32 vector, a
// of one [B,H,N,d] fp32 tensor and k of one fp32 tensor of the K/V heads the kernels see, [B,G,N_k,d]
// (or [B,H,N_k,d] under expand_kv), what attention.cpp allocates inside one layer call:
//   forward   standard 0 (S is computed into the kept P; with dropout P̃ and Z go to the kept
//             tensors), v1 s (P for O = P·V, S being kept), v2 0, checkpoint s (P, dropped in place)
//   backward  standard s (dP, then dS in place), v1 s (dP; P is recomputed over the kept S),
//             v2 r + a + 2k (D = rowsum(dO ∘ O) and the fp32 accumulators of dQ, dK and dV), or
//             r + a where v2.stored's kernels store dK and dV themselves (stores_key_gradients: G = H
//             on the wgmma kernels, a question about the current device),
//             checkpoint 2s (the recomputed P, and dP) + s with dropout (P̃; Z is redrawn, not stored)
// Naive GQA (expand_kv): checkpoint repeats K and V again in each pass (2 × [B,H,N_k,d] workspace;
// the other variants keep them), and the materialising variants' dK and dV at H heads wait in two
// [B,H,N_k,d] gradient buffers (tag grad) until they are summed per group into the stack's dK, dV.
// dQ, dK and dV are the stack's, in the storage dtype.
LayerCosts CudaAttention::costs(const Problem& problem, const ModelParams&) const {
  const int64_t element = element_bytes(problem.dtype);
  const int64_t s = problem.score_elements() * element;
  const int64_t r = problem.row_elements() * int64_t{4};
  const int64_t a = problem.q_elements() * int64_t{4};
  const int64_t k = (problem.repeats_kv() ? problem.expanded_kv_elements() : problem.kv_elements()) * int64_t{4};
  const bool dropout = problem.dropout > 0;
  const bool repeats_per_pass = problem.repeats_kv() && variant_ == Variant::checkpoint;
  const int64_t repeated = repeats_per_pass ? 2 * problem.expanded_kv_elements() * element : 0;
  const int64_t repeated_grads =
      problem.repeats_kv() && variant_ != Variant::v2 ? 2 * problem.expanded_kv_elements() * element : 0;
  LayerCosts costs;
  switch (variant_) {
    case Variant::standard: costs = {.forward_workspace_bytes = 0, .backward_workspace_bytes = s}; break;
    case Variant::v1: costs = {.forward_workspace_bytes = s, .backward_workspace_bytes = s}; break;
    case Variant::v2: {
      const bool stored = stores_key_gradients(kernels_, problem);
      costs = {.forward_workspace_bytes = 0, .backward_workspace_bytes = r + a + (stored ? 0 : 2 * k)};
      break;
    }
    case Variant::checkpoint:
      costs = {.forward_workspace_bytes = s, .backward_workspace_bytes = (dropout ? 3 : 2) * s};
      break;
  }
  costs.forward_workspace_bytes += repeated;
  costs.backward_workspace_bytes += repeated;
  costs.backward_extra_grad_bytes = repeated_grads;
  return costs;
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
  all.push_back(std::make_unique<CudaAttention>(
      Variant::v2, "v2.stored", CudaAttention::Kernels::newest_stored_keys,
      "v2 whose wgmma backward stores dK and dV in the storage dtype where G = H (no fp32 accumulators for "
      "them); a candidate measured beside v2"));
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
      .choose_isa = nullptr,  // one instruction set (the build's sm targets)
      .isa_help = nullptr,
      .isa_names = {},
      // For progress and --dry-run estimates only: an H200's bf16 attention runs at 150-600 TFLOP/s,
      // by implementation and shape (docs/cuda-design.md).
      .nominal_flop_rate = 2e14,
  });
}

}  // namespace flashbench
