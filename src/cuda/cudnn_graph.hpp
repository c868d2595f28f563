#pragma once
// Scaled dot-product attention through cuDNN 9's backend (graph) API: the forward graph with its
// softmax statistics and the backward graph, written as the operation graphs (matmul, pointwise,
// reduction, reshape) that cuDNN's fused flash-attention engines recognise, each finalised into one
// execution plan. Internal to src/cuda.
//
// Shapes: Q, K, V [B, H, N, d], independent tensors, row-major in the storage dtype (bf16 or fp16);
// O, dO, dQ, dK, dV the same (square attention only, G = H and N_k = N: cudnn_attention.cpp
// declines the rest); Stats [B, H, N] fp32 = max + log Σ exp of the scaled (and masked) scores, the
// natural-log LSE; S = scale·Q·Kᵀ, P = softmax(S) with j > i masked when causal
// (top-left, which for square attention is also bottom-right).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cudnn_library.hpp"
#include "flashbench/core/problem.hpp"

namespace flashbench::cuda {

// The ids by which a plan's caller binds its tensors (cuDNN's "unique ids").
enum class Bind : int64_t {
  Q = 1,        // the queries [B,H,N,d]
  K,            // the keys, seen as Kᵀ [B,H,d,N]
  V,            // the values [B,H,N,d] (forward) or seen as Vᵀ [B,H,d,N] (backward)
  O,            // [B,H,N,d]
  stats,        // [B,H,N,1] fp32
  dO,           // [B,H,N,d]
  dQ,           // [B,H,N,d]
  dK,           // [B,H,N,d]
  dV,           // [B,H,N,d]
  row_dot,      // D = rowsum(dO ∘ O) [B,H,N,1] fp32, scratch of the backward graph
  dQ_accum,     // dQ accumulated in fp32 [B,H,N,d], scratch of the backward graph
  scale,        // by value: float 1/sqrt(d)
  one,          // by value: float 1 (the place of a dropout scale in the pattern)
  masked,       // by value: float, the score given to masked entries (-inf, or the lowest float)
};

// What a graph is built for.
struct AttentionShape {
  int64_t batch;     // B
  int64_t heads;     // H
  int64_t seq;       // N
  int64_t head_dim;  // d
  bool causal;
  Dtype dtype;       // bf16 or fp16
  float scale;       // 1/sqrt(d)
  static AttentionShape of(const Problem& problem);
};

// One finalised execution plan and the descriptors it keeps alive.
class AttentionPlan {
 public:
  // `descriptors` owns every descriptor the plan was built from (tensors, operations, graph,
  // engine configuration), destroyed with it; `plan` is one of them.
  AttentionPlan(const CudnnLibrary& library, std::shared_ptr<void> descriptors, cudnnBackendDescriptor_t plan,
                int64_t workspace_bytes);

  // cuDNN's own workspace for one execution, as the plan states it. [bytes]
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Runs the plan on the handle's stream. `bindings` are (id, pointer) for every non-virtual tensor
  // of the graph (by-value tensors point to host memory); `workspace` holds workspace_bytes().
  // Throws RuntimeFailure with cuDNN's message.
  void execute(cudnnHandle_t handle, const std::vector<std::pair<Bind, void*>>& bindings, void* workspace) const;

 private:
  const CudnnLibrary* library_;
  std::shared_ptr<void> descriptors_;
  cudnnBackendDescriptor_t plan_;
  int64_t workspace_bytes_;
};

// A plan, or why cuDNN has none for this graph (its heuristics offer no engine, or none of the
// engines offered accepts it): a property of the problem on this GPU and cuDNN, a skipped row.
// A graph cuDNN rejects as malformed is not this: it throws RuntimeFailure (a failed row).
struct PlanOrReason {
  std::unique_ptr<AttentionPlan> plan;
  std::string not_supported;
};

// O = softmax(scale·Q·Kᵀ)·V and Stats. Binds Q, K, V, O, stats, scale (and masked when causal).
PlanOrReason build_forward_plan(const CudnnLibrary& library, cudnnHandle_t handle, const AttentionShape& shape);

// dQ, dK, dV from Q, K, V, O, dO and Stats, with the scratch row_dot [B,H,N] and dQ_accum
// [B,H,N,d] (fp32) that the caller allocates beside the plan's workspace (cuDNN's graph API leaves
// them to its user). Binds every id of Bind (masked only when causal).
PlanOrReason build_backward_plan(const CudnnLibrary& library, cudnnHandle_t handle, const AttentionShape& shape);

}  // namespace flashbench::cuda
