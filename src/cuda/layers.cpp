// One layer of each variant, and the stack: which buffers exist when, under which tag. The memory
// model in model.cpp reproduces this schedule in closed form; change them together.
#include "layers.hpp"

#include <fmt/format.h>

#include "flashbench/errors.hpp"

namespace flashbench::cuda {

LayerShape LayerShape::of(const Problem& problem) {
  return {problem.heads_total(), problem.seq, problem.head_dim, problem.causal, problem.scale(), problem.dtype};
}

namespace {

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw RuntimeFailure(fmt::format("cuBLAS error in {}: {}", what, cublasGetStatusString(status)));
}

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
void batched_gemm(Context& context, const LayerShape& shape, Op op_a, Op op_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const void* A, int64_t lda, int64_t stride_a, const void* B, int64_t ldb,
                  int64_t stride_b, float beta, void* C, int64_t ldc, int64_t stride_c) {
  const cudaDataType_t type = blas_type(shape.dtype);
  const auto to_blas = [](Op op) { return op == Op::transpose ? CUBLAS_OP_T : CUBLAS_OP_N; };
  check_blas(cublasGemmStridedBatchedEx(context.blas, to_blas(op_b), to_blas(op_a), int(N), int(M), int(K), &alpha, B,
                                        type, int(ldb), stride_b, A, type, int(lda), stride_a, &beta, C, type, int(ldc),
                                        stride_c, int(shape.heads_total), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmStridedBatchedEx");
}

int64_t score_bytes(const LayerShape& s) { return s.heads_total * s.seq * s.seq * element_bytes(s.dtype); }
int64_t row_bytes(const LayerShape& s) { return s.heads_total * s.seq * int64_t(sizeof(float)); }
int64_t qkv_elements(const LayerShape& s) { return s.heads_total * s.seq * s.head_dim; }

// S = scale · X Xᵀ [BH, N, N] into `scores`.
void scores_gemm(Context& context, const LayerShape& s, const void* X, void* scores) {
  const int64_t N = s.seq, d = s.head_dim;
  batched_gemm(context, s, Op::none, Op::transpose, N, N, d, s.scale, X, d, N * d, X, d, N * d, 0.0f, scores, N, N * N);
}

// O = P X [BH, N, d].
void output_gemm(Context& context, const LayerShape& s, const void* probs, const void* X, void* O) {
  const int64_t N = s.seq, d = s.head_dim;
  batched_gemm(context, s, Op::none, Op::none, N, d, N, 1.0f, probs, N, N * N, X, d, N * d, 0.0f, O, d, N * d);
}

// Backward of O = P V, P = softmax(S), S = scale·Q Kᵀ with Q = K = V = X, from the probabilities:
//   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(P ∘ dP)),  dQ = scale·dS K,  dK = scale·dSᵀ Q,
// summed into dX with beta = 1. Needs one [BH, N, N] workspace for dP (then dS, in place).
void backward_from_probs(Context& context, const LayerShape& s, const void* probs, const void* X, const void* dO,
                         void* dX) {
  const int64_t N = s.seq, d = s.head_dim;
  batched_gemm(context, s, Op::transpose, Op::none, N, d, N, 1.0f, probs, N, N * N, dO, d, N * d, 0.0f, dX, d, N * d);
  DeviceBuffer dprobs(context.allocator, Tag::workspace, score_bytes(s));
  batched_gemm(context, s, Op::none, Op::transpose, N, N, d, 1.0f, dO, d, N * d, X, d, N * d, 0.0f, dprobs.data(), N,
               N * N);
  softmax_backward_rows(s, probs, dprobs.data(), context.stream);
  batched_gemm(context, s, Op::none, Op::none, N, d, N, s.scale, dprobs.data(), N, N * N, X, d, N * d, 1.0f, dX, d,
               N * d);
  batched_gemm(context, s, Op::transpose, Op::none, N, d, N, s.scale, dprobs.data(), N, N * N, X, d, N * d, 1.0f, dX,
               d, N * d);
}

}  // namespace

void layer_forward(Variant variant, const LayerShape& s, Context& context, const void* X, void* O, KeptState& kept) {
  DeviceAllocator& allocator = context.allocator;
  switch (variant) {
    case Variant::standard:
      kept.scores = DeviceBuffer(allocator, Tag::kept, score_bytes(s));
      scores_gemm(context, s, X, kept.scores.data());
      softmax_rows(s, kept.scores.data(), kept.scores.data(), nullptr, nullptr, context.stream);
      output_gemm(context, s, kept.scores.data(), X, O);
      return;
    case Variant::v1: {
      kept.scores = DeviceBuffer(allocator, Tag::kept, score_bytes(s));
      kept.row_max = DeviceBuffer(allocator, Tag::kept, row_bytes(s));
      kept.row_sum = DeviceBuffer(allocator, Tag::kept, row_bytes(s));
      scores_gemm(context, s, X, kept.scores.data());
      softmax_rows(s, kept.scores.data(), nullptr, kept.row_max.as_float(), kept.row_sum.as_float(), context.stream);
      DeviceBuffer probs(allocator, Tag::workspace, score_bytes(s));
      probs_from_scores(s, kept.scores.data(), kept.row_max.as_float(), kept.row_sum.as_float(), probs.data(),
                        context.stream);
      output_gemm(context, s, probs.data(), X, O);
      return;
    }
    case Variant::v2:
      kept.lse = DeviceBuffer(allocator, Tag::kept, row_bytes(s));
      flash_forward(s, X, X, X, O, kept.lse.as_float(), context.stream);
      return;
    case Variant::checkpoint: {
      DeviceBuffer probs(allocator, Tag::workspace, score_bytes(s));
      scores_gemm(context, s, X, probs.data());
      softmax_rows(s, probs.data(), probs.data(), nullptr, nullptr, context.stream);
      output_gemm(context, s, probs.data(), X, O);
      return;
    }
  }
}

void layer_backward(Variant variant, const LayerShape& s, Context& context, const void* X, const void* O,
                    const void* dO, KeptState& kept, void* dX) {
  DeviceAllocator& allocator = context.allocator;
  switch (variant) {
    case Variant::standard:
      backward_from_probs(context, s, kept.scores.data(), X, dO, dX);
      break;
    case Variant::v1:
      // P = exp(S − m)/l over the kept S, in place: S is not needed afterwards.
      probs_from_scores(s, kept.scores.data(), kept.row_max.as_float(), kept.row_sum.as_float(), kept.scores.data(),
                        context.stream);
      backward_from_probs(context, s, kept.scores.data(), X, dO, dX);
      break;
    case Variant::v2: {
      DeviceBuffer row_dot(allocator, Tag::workspace, row_bytes(s));
      DeviceBuffer accumulator(allocator, Tag::workspace, qkv_elements(s) * int64_t(sizeof(float)));
      flash_backward(s, X, X, X, O, dO, kept.lse.as_float(), row_dot.as_float(), accumulator.as_float(),
                     context.stream);
      store_from_float(s.dtype, accumulator.as_float(), dX, qkv_elements(s), context.stream);
      break;
    }
    case Variant::checkpoint: {
      DeviceBuffer probs(allocator, Tag::workspace, score_bytes(s));
      scores_gemm(context, s, X, probs.data());
      softmax_rows(s, probs.data(), probs.data(), nullptr, nullptr, context.stream);
      backward_from_probs(context, s, probs.data(), X, dO, dX);
      break;
    }
  }
  kept = KeptState{};
}

// The schedule (DESIGN.md "Problem axes"), X the bytes of one [B,H,N,d] tensor:
//   forward  per layer i: X_{i+1} (tag kept for v2, whose O it is; activation otherwise), then the
//            variant's kept tensors, then the layer's workspace, freed when the layer returns.
//   backward non-v2 variants free X_L at once (nothing reads it). Per layer i = L-1..0: dX_i (grad),
//            the layer's workspace, freed; then the layer's kept tensors and its input X_i (i ≥ 1;
//            v2 frees its output X_{i+1} instead); the incoming dX_{i+1} (never dO) is freed.
void stack_forward(Variant variant, const Problem& problem, Context& context, const void* X0, StackState& state) {
  const LayerShape s = LayerShape::of(problem);
  const int64_t L = problem.layers;
  const int64_t x_bytes = problem.qkv_elements() * element_bytes(problem.dtype);
  const Tag output_tag = backward_reads_output(variant) ? Tag::kept : Tag::activation;
  state.outputs.clear();
  state.kept.clear();
  state.outputs.resize(L);
  state.kept.resize(L);
  const void* X = X0;
  for (int64_t i = 0; i < L; ++i) {
    state.outputs[i] = DeviceBuffer(context.allocator, output_tag, x_bytes);
    layer_forward(variant, s, context, X, state.outputs[i].data(), state.kept[i]);
    X = state.outputs[i].data();
  }
}

DeviceBuffer stack_backward(Variant variant, const Problem& problem, Context& context, const void* X0, const void* dO,
                            StackState& state) {
  const LayerShape s = LayerShape::of(problem);
  const int64_t L = problem.layers;
  const int64_t x_bytes = problem.qkv_elements() * element_bytes(problem.dtype);
  const bool reads_output = backward_reads_output(variant);
  if (!reads_output) state.outputs[L - 1].reset();
  DeviceBuffer incoming;  // dX_{i+1}; empty means dO
  for (int64_t i = L - 1; i >= 0; --i) {
    const void* X_i = i == 0 ? X0 : state.outputs[i - 1].data();
    const void* gradient = incoming.empty() ? dO : incoming.data();
    DeviceBuffer dX(context.allocator, Tag::grad, x_bytes);
    layer_backward(variant, s, context, X_i, state.outputs[i].data(), gradient, state.kept[i], dX.data());
    if (reads_output) {
      state.outputs[i].reset();
    } else if (i >= 1) {
      state.outputs[i - 1].reset();  // X_i: layer i was its last reader
    }
    incoming = std::move(dX);
  }
  return incoming;
}

}  // namespace flashbench::cuda
