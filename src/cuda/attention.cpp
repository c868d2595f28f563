// One layer of each variant on the GPU (CudaAttention, attention.hpp): the kept tensors arrive from
// the layer stack (harness/stack.hpp), the workspace is allocated here, through the layer call's
// memory space, exactly as CudaAttention::costs (registration.cpp) states. Every launch, cuBLAS
// call, allocation and free is on the device's one stream, so a workspace freed when a function
// returns is reused only after the kernels that read it.
//
// Q [B,H,N,d], K and V [B,G,N_k,d] are independent inputs (implementation.hpp); backward writes dQ,
// dK and dV. GQA runs natively through cuBLAS by stacking: the r query heads that share a K/V head
// are one matrix of r·N rows, so S = Q·Kᵀ is one product per K/V head and dV = Pᵀ·dO, dK = dSᵀ·Q sum
// over the group in their inner dimension (r·N) — no reduction pass, no repeated K/V. Under
// expand_kv K and V are repeated to H heads first (kept as Kx, Vx where the variant keeps its
// inputs), the kernels see G = H, and the gradients of the repeated heads are summed per group.
#include <fmt/format.h>

#include "attention.hpp"
#include "device.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/variant.hpp"
#include "flashbench/cuda/kernels.hpp"

namespace flashbench::cuda {

LayerShape LayerShape::of(const Problem& problem) {
  LayerShape shape{problem.heads_total(), problem.seq, problem.head_dim, problem.causal, problem.scale(), problem.dtype};
  shape.seq_k = problem.key_seq();
  shape.group_size = problem.repeats_kv() ? 1 : problem.group_size();
  // Keyed by seed 0 and offset 0: whether there is one (which kernels run the layer depends on it);
  // a layer call keys its own (Launch).
  shape.dropout = philox::make_dropout_mask(problem.dropout, 0, 0);
  return shape;
}

namespace {

// What a layer call launches with; its dropout mask keyed by the stack's seed and the layer, the
// same in the layer's forward and backward.
struct Launch {
  LayerShape shape;
  cublasHandle_t blas;
  cudaStream_t stream;
  MemorySpace& space;

  static Launch of(const LayerCall& call) {
    CudaDevice& device = cuda_device_of(call);
    LayerShape shape = LayerShape::of(call.problem);
    shape.dropout = philox::make_dropout_mask(call.problem.dropout, call.dropout_seed, uint64_t(call.layer));
    return {shape, device.blas(), device.stream(), call.space};
  }
  int64_t score_elements() const { return shape.heads_total * shape.seq * shape.seq_k; }
  int64_t score_bytes() const { return score_elements() * element_bytes(shape.dtype); }
  int64_t row_bytes() const { return shape.heads_total * shape.seq * int64_t(sizeof(float)); }
  int64_t q_elements() const { return shape.heads_total * shape.seq * shape.head_dim; }
  int64_t kv_elements() const { return shape.kv_heads_total() * shape.seq_k * shape.head_dim; }
};

// The attention inputs of one layer call as the kernels see them: Q [BH,N,d], K, V [BG,N_k,d].
struct Operands {
  const void* Q;
  const void* K;
  const void* V;
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

// Row-major, batched over the BG K/V heads (each with its r query heads stacked):
// C[M,N] = alpha·op(A)[M,K]·op(B)[K,N] + beta·C, fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32,
// so fp32 stays fp32). cuBLAS is column-major, and a row-major C is a column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, hence B before A.
void batched_gemm(const Launch& launch, Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                  int64_t lda, int64_t stride_a, const void* B, int64_t ldb, int64_t stride_b, float beta, void* C,
                  int64_t ldc, int64_t stride_c) {
  constexpr int64_t kIntMax = 2147483647;
  if (M > kIntMax || N > kIntMax || K > kIntMax)
    throw RuntimeFailure(fmt::format("a {}×{}×{} product is beyond cuBLAS's 32-bit extents", M, N, K));
  const cudaDataType_t type = blas_type(launch.shape.dtype);
  const auto to_blas = [](Op op) { return op == Op::transpose ? CUBLAS_OP_T : CUBLAS_OP_N; };
  check_blas(cublasGemmStridedBatchedEx(launch.blas, to_blas(op_b), to_blas(op_a), int(N), int(M), int(K), &alpha, B,
                                        type, int(ldb), stride_b, A, type, int(lda), stride_a, &beta, C, type, int(ldc),
                                        stride_c, int(launch.shape.kv_heads_total()), CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT),
             "cublasGemmStridedBatchedEx");
}

// The extents of one K/V head's products: rN stacked query rows, Nk keys, d.
struct Extents {
  int64_t rN, Nk, d;
  static Extents of(const Launch& launch) {
    const LayerShape& s = launch.shape;
    return {s.group_size * s.seq, s.seq_k, s.head_dim};
  }
};

// S = scale · Q Kᵀ [BH, N, N_k] into `scores`.
void scores_gemm(const Launch& launch, Operands in, void* scores) {
  const auto [rN, Nk, d] = Extents::of(launch);
  batched_gemm(launch, Op::none, Op::transpose, rN, Nk, d, launch.shape.scale, in.Q, d, rN * d, in.K, d, Nk * d, 0.0f,
               scores, Nk, rN * Nk);
}

// O = P V [BH, N, d].
void output_gemm(const Launch& launch, const void* probs, const void* V, void* O) {
  const auto [rN, Nk, d] = Extents::of(launch);
  batched_gemm(launch, Op::none, Op::none, rN, d, Nk, 1.0f, probs, Nk, rN * Nk, V, d, Nk * d, 0.0f, O, d, rN * d);
}

// Where backward writes the gradients (beta 0): dQ [BH,N,d] and dK, dV of the K/V heads the kernels
// see, all in the storage dtype.
struct GradientTargets {
  void* dQ;
  void* dK;
  void* dV;
};

// Backward of O = P̃ V, P = softmax(S), S = scale·Q Kᵀ, from the probabilities (and, with dropout,
// the dropped P̃ and the mask Z; `mask` null with dropout: Z redrawn from the generator):
//   dV = P̃ᵀ dO,  dP = (dO Vᵀ) ∘ Z/(1 − p),  dS = P ∘ (dP − rowsum(P ∘ dP)),
//   dQ = scale·dS K,  dK = scale·dSᵀ Q.
// Allocates one [BH, N, N_k] workspace for dP (then dS, in place).
void backward_from_probs(const Launch& launch, Operands in, const void* probs, const void* dropped,
                         const unsigned char* mask, const void* dO, const GradientTargets& out) {
  const LayerShape& s = launch.shape;
  const auto [rN, Nk, d] = Extents::of(launch);
  const void* weights = s.dropout.active() ? dropped : probs;
  batched_gemm(launch, Op::transpose, Op::none, Nk, d, rN, 1.0f, weights, Nk, rN * Nk, dO, d, rN * d, 0.0f, out.dV,
               d, Nk * d);
  RawBuffer dprobs(launch.space, Tag::workspace, launch.score_bytes());
  batched_gemm(launch, Op::none, Op::transpose, rN, Nk, d, 1.0f, dO, d, rN * d, in.V, d, Nk * d, 0.0f, dprobs.data(),
               Nk, rN * Nk);
  if (s.dropout.active()) dropout_backward(s, mask, dprobs.data(), launch.stream);
  softmax_backward_rows(s, probs, dprobs.data(), launch.stream);
  batched_gemm(launch, Op::none, Op::none, rN, d, Nk, s.scale, dprobs.data(), Nk, rN * Nk, in.K, d, Nk * d, 0.0f,
               out.dQ, d, rN * d);
  batched_gemm(launch, Op::transpose, Op::none, Nk, d, rN, s.scale, dprobs.data(), Nk, rN * Nk, in.Q, d, rN * d, 0.0f,
               out.dK, d, Nk * d);
}

// P = softmax(scale · Q Kᵀ) [BH, N, N_k] into `probs`, in place of S.
void probs_gemm(const Launch& launch, Operands in, void* probs) {
  scores_gemm(launch, in, probs);
  softmax_rows(launch.shape, probs, probs, nullptr, nullptr, launch.stream);
}

// Whether the variant keeps the repeated K and V under expand_kv (kept "Kx", "Vx"), or repeats
// them again in each pass (checkpoint).
bool keeps_repeated_kv(Variant variant, const Problem& problem) {
  for (const KeptTensor& tensor : kept_per_layer(variant, problem))
    if (tensor.name == "Kx") return true;
  return false;
}

// K and V as the kernels read them: the layer's own, or repeated to H heads — into the kept Kx and
// Vx (filled in forward), or, for a variant that keeps nothing (checkpoint), into workspace in each
// pass.
class KeyValues {
 public:
  KeyValues(const LayerCall& call, const Launch& launch, Variant variant, const LayerInputs& in, KeptTensors& kept,
            bool fill_kept) {
    const Problem& p = call.problem;
    if (!p.repeats_kv()) {
      K_ = in.K;
      V_ = in.V;
      return;
    }
    const int64_t per_head = p.key_seq() * p.head_dim, groups = p.batch * p.key_heads();
    void* K = nullptr;
    void* V = nullptr;
    const bool kept_repeated = keeps_repeated_kv(variant, p);
    if (kept_repeated) {
      K = kept["Kx"];
      V = kept["Vx"];
    } else {
      const int64_t bytes = p.expanded_kv_elements() * element_bytes(p.dtype);
      repeated_ = RawBuffer(launch.space, Tag::workspace, 2 * bytes);
      K = repeated_.data();
      V = repeated_.data() + bytes;
    }
    if (!kept_repeated || fill_kept) {
      repeat_heads(p.dtype, in.K, K, groups, p.group_size(), per_head, launch.stream);
      repeat_heads(p.dtype, in.V, V, groups, p.group_size(), per_head, launch.stream);
    }
    K_ = K;
    V_ = V;
  }
  Operands operands(const void* Q) const { return {Q, K_, V_}; }

 private:
  const void* K_ = nullptr;
  const void* V_ = nullptr;
  RawBuffer repeated_;
};

FlashKernels flash_kernels(CudaAttention::Kernels kernels) {
  return kernels == CudaAttention::Kernels::mma_sync ? FlashKernels::mma_sync : FlashKernels::best;
}

}  // namespace

bool stores_key_gradients(CudaAttention::Kernels kernels, const Problem& problem) {
  return kernels == CudaAttention::Kernels::newest_stored_keys &&
         flash_stores_key_gradients(problem.dtype, problem.group_size(), flash_kernels(kernels));
}

std::optional<std::string> CudaAttention::unsupported(const Problem& problem) const {
  if (variant_ != Variant::v2) return std::nullopt;
  return flash_unsupported(LayerShape::of(problem), flash_kernels(kernels_));
}

void CudaAttention::forward(LayerCall& call, const LayerInputs& inputs, void* O, KeptTensors& kept) {
  const Launch launch = Launch::of(call);
  const KeyValues key_values(call, launch, variant_, inputs, kept, /*fill_kept=*/true);
  const Operands in = key_values.operands(inputs.Q);
  const LayerShape& shape = launch.shape;
  const bool dropout = shape.dropout.active();
  switch (variant_) {
    case Variant::standard: {
      void* P = kept["P"];  // S is computed into the kept P, then normalised in place
      probs_gemm(launch, in, P);
      if (dropout) dropout_forward(shape, P, kept["Pd"], kept.get<unsigned char>("mask"), launch.stream);
      output_gemm(launch, dropout ? kept["Pd"] : P, in.V, O);
      return;
    }
    case Variant::v1: {
      void* S = kept["S"];
      float* row_max = kept.get<float>("m");
      float* row_sum = kept.get<float>("l");
      scores_gemm(launch, in, S);
      RawBuffer probs(launch.space, Tag::workspace, launch.score_bytes());
      softmax_rows(shape, S, probs.data(), row_max, row_sum, launch.stream);  // P and the row statistics at once
      if (dropout) dropout_forward(shape, probs.data(), kept["Pd"], kept.get<unsigned char>("mask"), launch.stream);
      output_gemm(launch, dropout ? kept["Pd"] : probs.data(), in.V, O);
      return;
    }
    case Variant::v2:
      flash_forward(shape, in.Q, in.K, in.V, O, kept.get<float>("LSE"), flash_kernels(kernels_), launch.stream);
      return;
    case Variant::checkpoint: {
      RawBuffer probs(launch.space, Tag::workspace, launch.score_bytes());
      probs_gemm(launch, in, probs.data());
      if (dropout) dropout_forward(shape, probs.data(), probs.data(), nullptr, launch.stream);  // P̃ over P
      output_gemm(launch, probs.data(), in.V, O);
      return;
    }
  }
}

void CudaAttention::backward(LayerCall& call, const LayerInputs& inputs, const void* O, const void* dO,
                             KeptTensors& kept, const LayerGradients& gradients) {
  const Launch launch = Launch::of(call);
  const LayerShape& shape = launch.shape;
  const Problem& p = call.problem;
  const KeyValues key_values(call, launch, variant_, inputs, kept, /*fill_kept=*/false);
  const Operands in = key_values.operands(inputs.Q);
  const bool dropout = shape.dropout.active();
  const int64_t per_kv_head = p.key_seq() * p.head_dim, kv_groups = p.batch * p.key_heads();
  // Under expand_kv the kernels' K/V heads are H: their gradients are summed per group of r into
  // the layer's G heads.
  const int64_t repeats = p.repeats_kv() ? p.group_size() : 1;

  if (variant_ == Variant::v2) {
    const FlashKernels kernels = flash_kernels(kernels_);
    // dK and dV straight into the stack's where this implementation stores them (v2.stored, G = H on
    // wgmma), else through fp32 accumulators at the kernels' K/V heads.
    const bool stored = stores_key_gradients(kernels_, p);
    RawBuffer row_dot(launch.space, Tag::workspace, launch.row_bytes());
    RawBuffer dq_accumulator(launch.space, Tag::workspace, launch.q_elements() * int64_t(sizeof(float)));
    RawBuffer dk_accumulator, dv_accumulator;
    KeyGradientTargets key_gradients{.dK = gradients.dK, .dV = gradients.dV};
    if (!stored) {
      const int64_t kv_accumulator_bytes = launch.kv_elements() * int64_t(sizeof(float));
      dk_accumulator = RawBuffer(launch.space, Tag::workspace, kv_accumulator_bytes);
      dv_accumulator = RawBuffer(launch.space, Tag::workspace, kv_accumulator_bytes);
      key_gradients = {.dk_accumulator = dk_accumulator.as<float>(), .dv_accumulator = dv_accumulator.as<float>()};
    }
    flash_backward(shape, in.Q, in.K, in.V, O, dO, kept.get<float>("LSE"), row_dot.as<float>(),
                   dq_accumulator.as<float>(), key_gradients, kernels, launch.stream);
    // fp32 to the storage dtype: dQ as it is, dK and dV (where not stored) gathered from the kernels'
    // K/V heads (a conversion, or under expand_kv the sum of each group's r repeated heads).
    store_from_float(shape.dtype, dq_accumulator.as<float>(), gradients.dQ, launch.q_elements(), launch.stream);
    if (stored) return;
    sum_head_groups(shape.dtype, dk_accumulator.data(), /*src_is_float=*/true, gradients.dK, kv_groups, repeats,
                    per_kv_head, launch.stream);
    sum_head_groups(shape.dtype, dv_accumulator.data(), /*src_is_float=*/true, gradients.dV, kv_groups, repeats,
                    per_kv_head, launch.stream);
    return;
  }

  // The materialising variants write dQ, dK and dV into the stack's buffers (native GQA: the stacked
  // products already sum the group), or under naive GQA dK and dV into [B,H,N_k,d] first, summed per
  // group afterwards.
  RawBuffer repeated_dK, repeated_dV;
  GradientTargets out{gradients.dQ, gradients.dK, gradients.dV};
  if (p.repeats_kv()) {
    const int64_t bytes = p.expanded_kv_elements() * element_bytes(shape.dtype);
    repeated_dK = RawBuffer(launch.space, Tag::grad, bytes);
    repeated_dV = RawBuffer(launch.space, Tag::grad, bytes);
    out = {gradients.dQ, repeated_dK.data(), repeated_dV.data()};
  }
  const unsigned char* mask = dropout && variant_ != Variant::checkpoint ? kept.get<unsigned char>("mask") : nullptr;
  switch (variant_) {
    case Variant::standard:
      backward_from_probs(launch, in, kept["P"], dropout ? kept["Pd"] : nullptr, mask, dO, out);
      break;
    case Variant::v1: {
      // P = exp(S − m)/l over the kept S, in place: S is not needed afterwards.
      void* S = kept["S"];
      probs_from_scores(shape, S, kept.get<float>("m"), kept.get<float>("l"), S, launch.stream);
      backward_from_probs(launch, in, S, dropout ? kept["Pd"] : nullptr, mask, dO, out);
      break;
    }
    case Variant::checkpoint: {
      // The whole forward again: P, and with dropout P̃ from the mask redrawn (Z itself is redrawn
      // again where dP needs it, never stored).
      RawBuffer probs(launch.space, Tag::workspace, launch.score_bytes());
      probs_gemm(launch, in, probs.data());
      RawBuffer dropped;
      if (dropout) {
        dropped = RawBuffer(launch.space, Tag::workspace, launch.score_bytes());
        dropout_forward(shape, probs.data(), dropped.data(), nullptr, launch.stream);
      }
      backward_from_probs(launch, in, probs.data(), dropped.data(), nullptr, dO, out);
      break;
    }
    case Variant::v2: break;  // above
  }
  if (p.repeats_kv()) {  // what repeat_interleave's backward does
    sum_head_groups(shape.dtype, repeated_dK.data(), /*src_is_float=*/false, gradients.dK, kv_groups, repeats,
                    per_kv_head, launch.stream);
    sum_head_groups(shape.dtype, repeated_dV.data(), /*src_is_float=*/false, gradients.dV, kv_groups, repeats,
                    per_kv_head, launch.stream);
  }
}

}  // namespace flashbench::cuda
