// v2 entry points: the D pre-pass, and the choice between the wgmma (Hopper), mma.sync and fp32
// kernels.
#include "flash_common.cuh"
#include "flash_internal.hpp"

namespace flashbench::cuda {

namespace {

// flash_wgmma.cu is compiled for sm_90a alone, which runs on compute capability 9.0 only.
// No device (a model asked on a machine without a GPU) answers false.
bool current_device_is_hopper() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // clear the error: the question is allowed to fail
    return false;
  }
  return major == 9 && minor == 0;
}

}  // namespace

bool flash_uses_wgmma(Dtype dtype, FlashKernels kernels) {
  return dtype != Dtype::fp32 && kernels == FlashKernels::best && current_device_is_hopper();
}

std::optional<std::string> flash_unsupported(const LayerShape& shape, FlashKernels kernels) {
  const int64_t d = shape.head_dim;
  if (d == 64 || d == 128) return std::nullopt;
  const bool wgmma = flash_uses_wgmma(shape.dtype, kernels);
  if (wgmma && (d == 96 || d == 192 || d == 256)) return std::nullopt;
  return "v2 on CUDA is built for head_dim 64 and 128 (and 96, 192, 256 on the wgmma kernels: bf16/fp16 on "
         "compute capability 9.0), not " +
         std::to_string(d);
}

bool flash_runs(const LayerShape& shape, FlashKernels kernels) { return !flash_unsupported(shape, kernels); }

void flash_forward(const LayerShape& shape, const void* Q, const void* K, const void* V, void* O, float* lse,
                   FlashKernels kernels, cudaStream_t stream) {
  if (!flash_runs(shape, kernels))
    throw RuntimeFailure("internal error: v2's kernels do not run this head dim (CudaAttention::unsupported says why)");
  if (flash_uses_wgmma(shape.dtype, kernels)) return flash_forward_wgmma(shape, Q, K, V, O, lse, stream);
  if (shape.dtype == Dtype::fp32) return flash_forward_simt(shape, Q, K, V, O, lse, stream);
  flash_forward_mma(shape, Q, K, V, O, lse, stream);
}

bool flash_stores_key_gradients(Dtype dtype, int64_t group_size, FlashKernels kernels) {
  return group_size == 1 && flash_uses_wgmma(dtype, kernels);
}

void flash_backward(const LayerShape& shape, const void* Q, const void* K, const void* V, const void* O,
                    const void* dO, const float* lse, float* row_dot, float* dq_accumulator,
                    const KeyGradientTargets& key_gradients, FlashKernels kernels, cudaStream_t stream) {
  if (!flash_runs(shape, kernels))
    throw RuntimeFailure("internal error: v2's kernels do not run this head dim (CudaAttention::unsupported says why)");
  const bool stored = key_gradients.dK != nullptr;
  if (stored && (key_gradients.dV == nullptr || !flash_stores_key_gradients(shape.dtype, shape.group_size, kernels)))
    throw RuntimeFailure("internal error: flash_backward asked to store dK and dV where its kernels add them");
  float* dk_accumulator = key_gradients.dk_accumulator;
  float* dv_accumulator = key_gradients.dv_accumulator;
  if (!stored && (dk_accumulator == nullptr || dv_accumulator == nullptr || dq_accumulator == dk_accumulator ||
                  dq_accumulator == dv_accumulator || dk_accumulator == dv_accumulator))
    throw RuntimeFailure("internal error: flash_backward needs three distinct accumulators for dQ, dK and dV");
  const int64_t rows = shape.heads_total * shape.seq;
  const size_t kv_bytes = sizeof(float) * size_t(shape.kv_heads_total() * shape.seq_k * shape.head_dim);
  // Every family adds dQ over key blocks; dK and dV, where not stored, over the blocks of a split group.
  check_cuda(cudaMemsetAsync(dq_accumulator, 0, sizeof(float) * size_t(rows * shape.head_dim), stream),
             "cudaMemsetAsync(dq_accumulator)");
  if (!stored) {
    check_cuda(cudaMemsetAsync(dk_accumulator, 0, kv_bytes, stream), "cudaMemsetAsync(dk_accumulator)");
    check_cuda(cudaMemsetAsync(dv_accumulator, 0, kv_bytes, stream), "cudaMemsetAsync(dv_accumulator)");
  }
  dispatch_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_row_dot<T>(static_cast<const T*>(O), static_cast<const T*>(dO), row_dot, rows, int(shape.head_dim), stream);
  });
  if (flash_uses_wgmma(shape.dtype, kernels))
    return flash_backward_wgmma(shape, Q, K, V, dO, lse, row_dot, dq_accumulator, key_gradients, stream);
  if (shape.dtype == Dtype::fp32)
    return flash_backward_simt(shape, Q, K, V, dO, lse, row_dot, dq_accumulator, dk_accumulator, dv_accumulator,
                               stream);
  flash_backward_mma(shape, Q, K, V, dO, lse, row_dot, dq_accumulator, dk_accumulator, dv_accumulator, stream);
}

}  // namespace flashbench::cuda
