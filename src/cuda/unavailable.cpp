// The CUDA device in a build without CUDA: registered all the same (its model answers, see
// registration.cpp), but it cannot be opened, and opening it explains how to get it.
#include "attention.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/cuda/device.hpp"

namespace flashbench::cuda {

namespace {
constexpr const char* kNotBuilt =
    "this flashbench was built without CUDA (configure with -DFLASHBENCH_CUDA=ON where nvcc is installed)";
}  // namespace

int device_count() { return 0; }

std::optional<int> compute_capability(int) { return std::nullopt; }

std::optional<int64_t> l2_bytes_of(int) { return std::nullopt; }

std::unique_ptr<Device> open_device(const DeviceOptions&) { throw UsageError(kNotBuilt); }

std::optional<std::string> CudaAttention::unsupported(const Problem&) const { return std::string(kNotBuilt); }

// No Hopper GPU without CUDA: v2.stored's model is v2's (its accumulators).
bool stores_key_gradients(CudaAttention::Kernels, const Problem&) { return false; }

// Without a device no layer call can be made (open_device throws); these only keep the promise.
void CudaAttention::forward(LayerCall&, const LayerInputs&, void*, KeptTensors&) { throw RuntimeFailure(kNotBuilt); }
void CudaAttention::backward(LayerCall&, const LayerInputs&, const void*, const void*, KeptTensors&,
                             const LayerGradients&) {
  throw RuntimeFailure(kNotBuilt);
}

}  // namespace flashbench::cuda
