// `--impl cudnn` where cuDNN 9's headers were found at build time (cudnn_attention.hpp): one layer
// of v2 through cuDNN's fused attention graphs (cudnn_graph.hpp), its workspace allocated through
// the layer call's memory space as CudnnAttention::costs (cudnn_costs.cpp) states it. Everything is
// on the device's one stream, as in attention.cpp.
#include "cudnn_attention.hpp"

#include <limits>
#include <map>
#include <tuple>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cudnn_graph.hpp"
#include "cudnn_library.hpp"
#include "device.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/cuda/device.hpp"

namespace flashbench::cuda {

namespace {

// Everything a plan depends on: the shape, the mask, the dtype (the scale follows from d).
using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, Dtype>;

PlanKey key_of(const Problem& p) { return {p.batch, p.heads, p.seq, p.head_dim, p.causal, p.dtype}; }

// The two plans of one problem, or why there are none: cuDNN has no engine (not_supported, a
// skipped row) or building them failed (failure, a failed row when a layer call needs them).
struct Plans {
  PlanOrReason forward;
  PlanOrReason backward;
  std::string failure;
};

// cuDNN's fused attention kernels load head rows in 16-byte vectors: d a multiple of 8 elements.
constexpr int64_t kHeadDimMultiple = 8;

// What cuDNN's own frontend refuses or works around for the fused fp16/bf16 attention, by version
// (its SDPA backward node): one query and one key; the backward of 9.10.0 and 9.10.1, which have
// known bugs; and, up to 9.15, the backward for N not a multiple of 128 without a padding mask,
// which the frontend then adds (this graph has none, so such N are declined there).
constexpr size_t kBrokenBackwardFirst = 91000, kBrokenBackwardLast = 91001;
constexpr size_t kLastNeedingPaddingMask = 91500;
constexpr int64_t kUnpaddedSeqMultiple = 128;

std::optional<std::string> declined_by_version(const Problem& problem, size_t version) {
  if (problem.seq == 1) return std::string("cuDNN's fused attention does not take N = 1 (one query, one key)");
  if (version >= kBrokenBackwardFirst && version <= kBrokenBackwardLast)
    return fmt::format("cuDNN {}'s fused attention backward has known bugs (9.10.2 or later needed)", version);
  if (version <= kLastNeedingPaddingMask && problem.seq % kUnpaddedSeqMultiple != 0)
    return fmt::format("cuDNN {} (9.15 or older) computes the fused attention backward for N a multiple of {} "
                       "only, without a padding mask, not N = {}",
                       version, kUnpaddedSeqMultiple, problem.seq);
  return std::nullopt;
}

// What the graphs of cudnn_graph.cpp do not express: K and V of another head count or length than Q
// (their tensors are all [B,H,N,d], the causal mask top-left) and dropout (no mask in the graph).
// Their plans are keyed by B, H, N, d, the mask and the dtype alone, which holds for what is left.
std::optional<std::string> declined_by_graph(const Problem& problem) {
  if (!problem.square())
    return fmt::format("flashbench's cuDNN graphs run G = H and N_k = N only, not {}", problem.workload());
  if (problem.dropout > 0) return std::string("flashbench's cuDNN graphs run without dropout");
  return std::nullopt;
}

// The score given to masked entries: the lowest float before 9.10 (what those versions expect),
// -inf from then on, as cuDNN's frontend chooses.
float masked_score(size_t version) {
  constexpr size_t kInfinityFrom = 91000;
  return version < kInfinityFrom ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
}

}  // namespace

std::optional<std::string> cudnn_missing() {
  std::string why_not;
  if (cudnn_library(why_not)) return std::nullopt;
  return why_not;
}

struct CudnnAttention::State {
  const CudnnLibrary* library = nullptr;
  std::string library_missing;  // why library is null
  cudnnHandle_t handle = nullptr;
  int handle_device = -1;
  std::map<PlanKey, Plans> plans;

  // Opens cuDNN on first use; false (library_missing says why) when it cannot be.
  bool load() {
    if (!library && library_missing.empty()) library = cudnn_library(library_missing);
    return library != nullptr;
  }

  ~State() {
    plans.clear();  // plans before the handle they were built with
    if (handle) {
      library->set_stream(handle, nullptr);  // the device's stream may be gone already
      library->destroy(handle);
    }
  }

  // The plans of `problem` on the current GPU, built on first use.
  Plans& plans_for(const Problem& problem) {
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    if (handle && handle_device != device) {
      plans.clear();
      library->destroy(handle);
      handle = nullptr;
    }
    if (!handle) {
      if (const cudnnStatus_t status = library->create(&handle); status != CUDNN_STATUS_SUCCESS) {
        handle = nullptr;
        throw RuntimeFailure(fmt::format("cudnnCreate failed: {}", library->describe(status)));
      }
      handle_device = device;
    }
    auto [entry, inserted] = plans.try_emplace(key_of(problem));
    if (inserted) {
      const AttentionShape shape = AttentionShape::of(problem);
      try {
        entry->second.forward = build_forward_plan(*library, handle, shape);
        entry->second.backward = build_backward_plan(*library, handle, shape);
      } catch (const RuntimeFailure& e) {
        entry->second.failure = e.what();
      }
    }
    return entry->second;
  }

  // The plans a layer call runs with, bound to the device's stream; throws RuntimeFailure when
  // there are none (a problem the pre-flight did not see, or a graph cuDNN rejected).
  Plans& ready_plans(const Problem& problem, cudaStream_t stream) {
    if (!load()) throw RuntimeFailure(library_missing);
    Plans& p = plans_for(problem);
    if (!p.failure.empty()) throw RuntimeFailure(p.failure);
    for (const PlanOrReason* plan : {&p.forward, &p.backward})
      if (!plan->plan) throw RuntimeFailure(plan->not_supported);
    if (const cudnnStatus_t status = library->set_stream(handle, stream); status != CUDNN_STATUS_SUCCESS)
      throw RuntimeFailure(fmt::format("cudnnSetStream failed: {}", library->describe(status)));
    return p;
  }
};

CudnnAttention::CudnnAttention() : state_(std::make_unique<State>()) {}
CudnnAttention::~CudnnAttention() = default;

void CudnnAttention::annotate(Row& row) const {
  // cudnnGetVersion() is major·10000 + minor·100 + patch from cuDNN 9 on.
  if (state_->load())
    row.library = fmt::format("cuDNN {}.{}.{}", state_->library->version / 10000, state_->library->version % 10000 / 100,
                              state_->library->version % 100);
}

std::optional<std::string> CudnnAttention::unsupported(const Problem& problem) const {
  if (problem.dtype == Dtype::fp32)
    return std::string("cuDNN's fused attention takes bf16 or fp16, not fp32");
  if (auto declined = declined_by_graph(problem)) return declined;
  if (problem.head_dim % kHeadDimMultiple != 0)
    return fmt::format("cuDNN's fused attention needs head_dim a multiple of {}, not {}", kHeadDimMultiple,
                       problem.head_dim);
  if (!state_->load()) return state_->library_missing;
  if (auto declined = declined_by_version(problem, state_->library->version)) return declined;
  try {
    const Plans& plans = state_->plans_for(problem);
    if (!plans.failure.empty()) return std::nullopt;  // not a property of the problem: the layer call fails
    if (!plans.forward.plan) return plans.forward.not_supported;
    if (!plans.backward.plan) return plans.backward.not_supported;
  } catch (const RuntimeFailure&) {
    return std::nullopt;  // no handle (no GPU): the layer call says why, as a failed row
  }
  return std::nullopt;
}

std::optional<CudnnAttention::PlanWorkspace> CudnnAttention::plan_workspace(const Problem& problem) const {
  if (declined_by_graph(problem)) return std::nullopt;  // never built: another problem may share its key
  const auto found = state_->plans.find(key_of(problem));
  if (found == state_->plans.end() || !found->second.forward.plan || !found->second.backward.plan)
    return std::nullopt;
  return PlanWorkspace{found->second.forward.plan->workspace_bytes(), found->second.backward.plan->workspace_bytes()};
}

void CudnnAttention::forward(LayerCall& call, const LayerInputs& in, void* O, KeptTensors& kept) {
  CudaDevice& device = cuda_device_of(call);
  const Plans& plans = state_->ready_plans(call.problem, device.stream());
  const AttentionPlan& plan = *plans.forward.plan;
  RawBuffer workspace;
  if (plan.workspace_bytes() > 0) workspace = RawBuffer(call.space, Tag::workspace, plan.workspace_bytes());
  float scale = call.problem.scale();
  float masked = masked_score(state_->library->version);
  std::vector<std::pair<Bind, void*>> bindings = {{Bind::Q, const_cast<void*>(in.Q)},
                                                  {Bind::K, const_cast<void*>(in.K)},
                                                  {Bind::V, const_cast<void*>(in.V)},
                                                  {Bind::O, O},
                                                  {Bind::stats, kept["LSE"]},
                                                  {Bind::scale, &scale}};
  if (call.problem.causal) bindings.emplace_back(Bind::masked, &masked);
  plan.execute(state_->handle, bindings, workspace.data());
}

void CudnnAttention::backward(LayerCall& call, const LayerInputs& in, const void* O, const void* dO, KeptTensors& kept,
                              const LayerGradients& gradients) {
  CudaDevice& device = cuda_device_of(call);
  const Problem& problem = call.problem;
  const Plans& plans = state_->ready_plans(problem, device.stream());
  const AttentionPlan& plan = *plans.backward.plan;
  RawBuffer row_dot(call.space, Tag::workspace, problem.row_elements() * int64_t(sizeof(float)));
  RawBuffer dQ_accum(call.space, Tag::workspace, problem.q_elements() * int64_t(sizeof(float)));
  RawBuffer workspace;
  if (plan.workspace_bytes() > 0) workspace = RawBuffer(call.space, Tag::workspace, plan.workspace_bytes());
  // Before 9.6 cuDNN's backward adds into the accumulator it is given, later ones overwrite it.
  constexpr size_t kOverwritesAccumulator = 90600;
  if (state_->library->version < kOverwritesAccumulator)
    check_cuda(cudaMemsetAsync(dQ_accum.data(), 0, size_t(dQ_accum.bytes()), device.stream()), "cudaMemsetAsync");
  float scale = problem.scale();
  float one = 1.0f;
  float masked = masked_score(state_->library->version);
  std::vector<std::pair<Bind, void*>> bindings = {
      {Bind::Q, const_cast<void*>(in.Q)},
      {Bind::K, const_cast<void*>(in.K)},
      {Bind::V, const_cast<void*>(in.V)},
      {Bind::O, const_cast<void*>(O)},
      {Bind::dO, const_cast<void*>(dO)},
      {Bind::stats, kept["LSE"]},
      {Bind::dQ, gradients.dQ},  // the graph writes the stack's gradients directly
      {Bind::dK, gradients.dK},
      {Bind::dV, gradients.dV},
      {Bind::row_dot, row_dot.data()},
      {Bind::dQ_accum, dQ_accum.data()},
      {Bind::scale, &scale},
      {Bind::one, &one}};
  if (problem.causal) bindings.emplace_back(Bind::masked, &masked);
  plan.execute(state_->handle, bindings, workspace.data());
}

}  // namespace flashbench::cuda
