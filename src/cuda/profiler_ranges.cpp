// The CUDA device's profiler ranges: NVTX 3, header-only in the CUDA toolkit. Without a profiler
// attached a push or pop is a call that returns at once; under Nsight Systems or Nsight Compute
// (`flashbench run --profile`) the ranges name each implementation, pass and layer.
#include <nvtx3/nvToolsExt.h>

#include "device.hpp"

namespace flashbench::cuda {

void CudaDevice::push_range(const std::string& name) { nvtxRangePushA(name.c_str()); }

void CudaDevice::pop_range() { nvtxRangePop(); }

}  // namespace flashbench::cuda
