#pragma once
// The CUDA device seen from code compiled with or without CUDA (the tests): nothing here needs CUDA
// headers. The device itself is reached through the registry, as "cuda" (harness/registry.hpp).
#include <optional>
#include <string>

namespace flashbench::cuda {

// CUDA devices this binary can use; 0 when built without CUDA, without a driver or without a GPU.
int device_count();

// The compute capability of GPU `index` as 10·major + minor (90 for Hopper), or nothing without one.
std::optional<int> compute_capability(int index);

// Why `--impl cudnn` cannot run in this process (built without cuDNN's headers, or the library cannot
// be loaded at run time), or nothing when cuDNN is there.
std::optional<std::string> cudnn_missing();

}  // namespace flashbench::cuda
