#pragma once
// cuDNN, loaded at run time. flashbench compiles against cuDNN 9's headers (for the types and the
// backend enums) but links nothing of it: the library is opened with dlopen on first use, so a
// binary built here runs where cuDNN is absent (then `--impl cudnn` is a skipped row saying why) and
// finds the copy that PyTorch's wheel carries on a machine where that is the only one.
//
// Which library: FLASHBENCH_CUDNN_LIBRARY, when set, is the path of libcudnn.so.9 to open (its
// sibling libcudnn_*.so.9 in the same folder are opened first, so that cuDNN's own loading of its
// sub-libraries finds them); otherwise "libcudnn.so.9" through the dynamic loader's search path.
// Internal to src/cuda.
#include <cstddef>
#include <string>

#include <cudnn_backend.h>

namespace flashbench::cuda {

// The entry points of the backend (graph) API that flashbench calls, and the library's version.
struct CudnnLibrary {
  std::string path;     // what was opened
  size_t version = 0;   // cudnnGetVersion(): 9xxyy for 9.x.y

  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnGetLastErrorString) last_error = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;

  // "CUDNN_STATUS_…: <cuDNN's last error message>", for the reason of a failed or skipped row.
  std::string describe(cudnnStatus_t status) const;
};

// The oldest cuDNN whose backend API flashbench's graphs are written for.
inline constexpr size_t kMinCudnnVersion = 90000;

// The library, opened once per process; nullptr when it cannot be, with `why_not` saying why (no
// library found, a symbol missing, a version before 9.0).
const CudnnLibrary* cudnn_library(std::string& why_not);

}  // namespace flashbench::cuda
