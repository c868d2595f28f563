// One layer of each variant on the GPU (CudaAttention, attention.hpp): the kept tensors arrive from
// the layer stack (harness/stack.hpp), the workspace is allocated here, through the layer call's
// memory space, exactly as CudaAttention::costs (registration.cpp) states. Every launch, cuBLAS
// call, allocation and free is on the device's one stream, so a workspace freed when a function
// returns is reused only after the kernels that read it.
#include <fmt/format.h>

#include "attention.hpp"
#include "device.hpp"
#include "flashbench/cuda/kernels.hpp"
#include "flashbench/errors.hpp"

namespace flashbench::cuda {

LayerShape LayerShape::of(const Problem& problem) {
  return {problem.heads_total(), problem.seq, problem.head_dim, problem.causal, problem.scale(), problem.dtype};
}

namespace {

// What a layer call launches with.
struct Launch {
  LayerShape shape;
  cublasHandle_t blas;
  cudaStream_t stream;
  MemorySpace& space;

  static Launch of(const LayerCall& call) {
    CudaDevice& device = cuda_device_of(call);
    return {LayerShape::of(call.problem), device.blas(), device.stream(), call.space};
  }
  int64_t score_bytes() const { return shape.heads_total * shape.seq * shape.seq * element_bytes(shape.dtype); }
  int64_t row_bytes() const { return shape.heads_total * shape.seq * int64_t(sizeof(float)); }
  int64_t qkv_elements() const { return shape.heads_total * shape.seq * shape.head_dim; }
};

cudaDataType_t blas_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return CUDA_R_32F;
    case Dtype::bf16: return CUDA_R_16BF;
    case Dtype::fp16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

enum class Op { none, transpose };

// Row-major, batched over the BH heads: C[M,N] = alpha·op(A)[M,K]·op(B)[K,N] + beta·C, fp32
// accumulation (CUBLAS_COMPUTE_32F: no TF32, so fp32 stays fp32). cuBLAS is column-major, and a
// row-major C is a column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, hence B before A.
void batched_gemm(const Launch& launch, Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                  int64_t lda, int64_t stride_a, const void* B, int64_t ldb, int64_t stride_b, float beta, void* C,
                  int64_t ldc, int64_t stride_c) {
  const cudaDataType_t type = blas_type(launch.shape.dtype);
  const auto to_blas = [](Op op) { return op == Op::transpose ? CUBLAS_OP_T : CUBLAS_OP_N; };
  check_blas(cublasGemmStridedBatchedEx(launch.blas, to_blas(op_b), to_blas(op_a), int(N), int(M), int(K), &alpha, B,
                                        type, int(ldb), stride_b, A, type, int(lda), stride_a, &beta, C, type, int(ldc),
                                        stride_c, int(launch.shape.heads_total), CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT),
             "cublasGemmStridedBatchedEx");
}

// S = scale · X Xᵀ [BH, N, N] into `scores`.
void scores_gemm(const Launch& launch, const void* X, void* scores) {
  const int64_t N = launch.shape.seq, d = launch.shape.head_dim;
  batched_gemm(launch, Op::none, Op::transpose, N, N, d, launch.shape.scale, X, d, N * d, X, d, N * d, 0.0f, scores, N,
               N * N);
}

// O = P X [BH, N, d].
void output_gemm(const Launch& launch, const void* probs, const void* X, void* O) {
  const int64_t N = launch.shape.seq, d = launch.shape.head_dim;
  batched_gemm(launch, Op::none, Op::none, N, d, N, 1.0f, probs, N, N * N, X, d, N * d, 0.0f, O, d, N * d);
}

// Backward of O = P V, P = softmax(S), S = scale·Q Kᵀ with Q = K = V = X, from the probabilities:
//   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(P ∘ dP)),  dQ = scale·dS K,  dK = scale·dSᵀ Q,
// summed into dX with beta = 1. Allocates one [BH, N, N] workspace for dP (then dS, in place).
void backward_from_probs(const Launch& launch, const void* probs, const void* X, const void* dO, void* dX) {
  const LayerShape& s = launch.shape;
  const int64_t N = s.seq, d = s.head_dim;
  batched_gemm(launch, Op::transpose, Op::none, N, d, N, 1.0f, probs, N, N * N, dO, d, N * d, 0.0f, dX, d, N * d);
  RawBuffer dprobs(launch.space, Tag::workspace, launch.score_bytes());
  batched_gemm(launch, Op::none, Op::transpose, N, N, d, 1.0f, dO, d, N * d, X, d, N * d, 0.0f, dprobs.data(), N,
               N * N);
  softmax_backward_rows(s, probs, dprobs.data(), launch.stream);
  batched_gemm(launch, Op::none, Op::none, N, d, N, s.scale, dprobs.data(), N, N * N, X, d, N * d, 1.0f, dX, d, N * d);
  batched_gemm(launch, Op::transpose, Op::none, N, d, N, s.scale, dprobs.data(), N, N * N, X, d, N * d, 1.0f, dX, d,
               N * d);
}

// P = softmax(scale · X Xᵀ) [BH, N, N] into `probs`, in place of S.
void probs_gemm(const Launch& launch, const void* X, void* probs) {
  scores_gemm(launch, X, probs);
  softmax_rows(launch.shape, probs, probs, nullptr, nullptr, launch.stream);
}

FlashKernels flash_kernels(CudaAttention::Kernels kernels) {
  return kernels == CudaAttention::Kernels::mma_sync ? FlashKernels::mma_sync : FlashKernels::best;
}

}  // namespace

std::optional<std::string> CudaAttention::unsupported(const Problem& problem) const {
  // The CUDA kernels run square self-attention without dropout so far (docs/workloads.md).
  if (problem.key_heads() != problem.heads)
    return fmt::format("G = {} K/V heads for H = {}: the CUDA kernels run G = H only so far", problem.key_heads(),
                       problem.heads);
  if (problem.key_seq() != problem.seq)
    return fmt::format("N_k = {} keys for N = {} queries: the CUDA kernels run N_k = N only so far", problem.key_seq(),
                       problem.seq);
  if (problem.dropout > 0)
    return fmt::format("dropout {:g}: the CUDA kernels run without dropout so far", problem.dropout);
  if (variant_ == Variant::v2 && !flash_supports(problem.head_dim))
    return fmt::format("v2 on CUDA is built for head_dim 64 and 128, not {}", problem.head_dim);
  return std::nullopt;
}

void CudaAttention::forward(LayerCall& call, const void* X, void* O, KeptTensors& kept) {
  const Launch launch = Launch::of(call);
  switch (variant_) {
    case Variant::standard: {
      void* P = kept["P"];  // S is computed into the kept P, then normalised in place
      probs_gemm(launch, X, P);
      output_gemm(launch, P, X, O);
      return;
    }
    case Variant::v1: {
      void* S = kept["S"];
      float* row_max = kept.get<float>("m");
      float* row_sum = kept.get<float>("l");
      scores_gemm(launch, X, S);
      softmax_rows(launch.shape, S, nullptr, row_max, row_sum, launch.stream);
      RawBuffer probs(launch.space, Tag::workspace, launch.score_bytes());
      probs_from_scores(launch.shape, S, row_max, row_sum, probs.data(), launch.stream);
      output_gemm(launch, probs.data(), X, O);
      return;
    }
    case Variant::v2:
      flash_forward(launch.shape, X, X, X, O, kept.get<float>("LSE"), flash_kernels(kernels_), launch.stream);
      return;
    case Variant::checkpoint: {
      RawBuffer probs(launch.space, Tag::workspace, launch.score_bytes());
      probs_gemm(launch, X, probs.data());
      output_gemm(launch, probs.data(), X, O);
      return;
    }
  }
}

void CudaAttention::backward(LayerCall& call, const void* X, const void* O, Gradient dO, KeptTensors& kept, void* dX) {
  const Launch launch = Launch::of(call);
  // This device's gradients are in the storage dtype (gradient_dtype), like dO itself.
  if (dO.dtype != launch.shape.dtype)
    throw RuntimeFailure(fmt::format("internal error: a {} gradient for a {} layer on CUDA", to_string(dO.dtype),
                                     to_string(launch.shape.dtype)));
  switch (variant_) {
    case Variant::standard:
      backward_from_probs(launch, kept["P"], X, dO.data, dX);
      return;
    case Variant::v1: {
      // P = exp(S − m)/l over the kept S, in place: S is not needed afterwards.
      void* S = kept["S"];
      probs_from_scores(launch.shape, S, kept.get<float>("m"), kept.get<float>("l"), S, launch.stream);
      backward_from_probs(launch, S, X, dO.data, dX);
      return;
    }
    case Variant::v2: {
      RawBuffer row_dot(launch.space, Tag::workspace, launch.row_bytes());
      RawBuffer accumulator(launch.space, Tag::workspace, launch.qkv_elements() * int64_t(sizeof(float)));
      flash_backward(launch.shape, X, X, X, O, dO.data, kept.get<float>("LSE"), row_dot.as<float>(),
                     accumulator.as<float>(), flash_kernels(kernels_), launch.stream);
      store_from_float(launch.shape.dtype, accumulator.as<float>(), dX, launch.qkv_elements(), launch.stream);
      return;
    }
    case Variant::checkpoint: {
      RawBuffer probs(launch.space, Tag::workspace, launch.score_bytes());
      probs_gemm(launch, X, probs.data());
      backward_from_probs(launch, probs.data(), X, dO.data, dX);
      return;
    }
  }
}

}  // namespace flashbench::cuda
