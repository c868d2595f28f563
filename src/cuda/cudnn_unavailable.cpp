// `--impl cudnn` in a build without cuDNN 9's headers (or without CUDA): registered all the same, its
// costs answer the model (cudnn_costs.cpp), and asking it to run is a skipped row that says why.
#include "cudnn_attention.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/cuda/device.hpp"

namespace flashbench::cuda {

namespace {
constexpr const char* kNotBuilt =
    "this flashbench was built without cuDNN (configure with -DFLASHBENCH_CUDA=ON where cuDNN 9's headers, "
    "cudnn_backend.h, are installed)";
}  // namespace

std::optional<std::string> cudnn_missing() { return std::string(kNotBuilt); }

struct CudnnAttention::State {};

CudnnAttention::CudnnAttention() = default;
CudnnAttention::~CudnnAttention() = default;

std::optional<std::string> CudnnAttention::unsupported(const Problem&) const { return std::string(kNotBuilt); }
void CudnnAttention::annotate(Row&) const {}

std::optional<CudnnAttention::PlanWorkspace> CudnnAttention::plan_workspace(const Problem&) const {
  return std::nullopt;
}

// unsupported() refuses every problem, so no layer call is made; these only keep the promise.
void CudnnAttention::forward(LayerCall&, const LayerInputs&, void*, KeptTensors&) { throw RuntimeFailure(kNotBuilt); }
void CudnnAttention::backward(LayerCall&, const LayerInputs&, const void*, const void*, KeptTensors&,
                             const LayerGradients&) {
  throw RuntimeFailure(kNotBuilt);
}

}  // namespace flashbench::cuda
