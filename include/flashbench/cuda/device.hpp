#pragma once
// The CUDA device seen from code compiled with or without CUDA (the tests): nothing here needs CUDA
// headers. The device itself is reached through the registry, as "cuda" (harness/registry.hpp).
namespace flashbench::cuda {

// CUDA devices this binary can use; 0 when built without CUDA, without a driver or without a GPU.
int device_count();

}  // namespace flashbench::cuda
