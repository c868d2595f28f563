#pragma once
// `--impl cudnn`: variant v2 computed by cuDNN's fused flash attention through its graph API, the
// yardstick beside flashbench's own kernels in the same binary, on the same inputs, in the same
// ledger. Internal to src/cuda and free of CUDA and cuDNN headers: its costs are in every build
// (cudnn_costs.cpp); the rest in cudnn_attention.cpp where cuDNN 9's headers were found at build
// time, cudnn_unavailable.cpp otherwise.
//
// What it keeps is v2's statement: O and LSE [B,H,N] fp32 (cuDNN's softmax statistics, the
// natural-log LSE). Its backward graph writes dQ, dK and dV straight into the stack's gradients; per
// backward layer call it allocates the row dot D [B,H,N] and the fp32 dQ accumulator [B,H,N,d] the
// graph needs (tag workspace), and cuDNN's own workspace (tag workspace), whose size only cuDNN
// knows, once it has built the plan for the problem on this GPU.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "flashbench/harness/implementation.hpp"

namespace flashbench::cuda {

class CudnnAttention final : public Implementation {
 public:
  CudnnAttention();
  ~CudnnAttention() override;

  std::string_view name() const override { return "cudnn"; }
  Variant variant() const override { return Variant::v2; }
  std::string_view summary() const override;
  // bf16 and fp16 only; G = H and N_k = N without dropout only (what its graphs express); cuDNN
  // absent or older than 9.0; no engine of this cuDNN for the problem's graphs on this GPU (which
  // building the plans finds out, on the device the run has opened).
  std::optional<std::string> unsupported(const Problem& problem) const override;
  LayerCosts costs(const Problem& problem, const ModelParams& params) const override;
  // Its rows name the cuDNN that ran ("cuDNN 9.10.2"), where one could be loaded.
  void annotate(Row& row) const override;

  void forward(LayerCall& call, const LayerInputs& in, void* O, KeptTensors& kept) override;
  void backward(LayerCall& call, const LayerInputs& in, const void* O, const void* dO, KeptTensors& kept,
                const LayerGradients& gradients) override;

  // cuDNN's own workspace of the forward and backward plans for `problem`, when they have been built
  // in this process (by unsupported() or a layer call); nothing before. [bytes]
  struct PlanWorkspace {
    int64_t forward_bytes = 0;
    int64_t backward_bytes = 0;
  };
  std::optional<PlanWorkspace> plan_workspace(const Problem& problem) const;

 private:
  struct State;  // the cuDNN handle and the plans built so far; defined where cuDNN is built in
  std::unique_ptr<State> state_;
};

}  // namespace flashbench::cuda
