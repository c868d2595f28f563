// Compiled into flashbench_core only when the CUDA backend is not built.
#include "flashbench/backend.hpp"
#include "flashbench/cuda/stack.hpp"
#include "flashbench/errors.hpp"

namespace flashbench {

namespace {
[[noreturn]] void no_cuda() {
  throw UsageError("this flashbench was built without CUDA (configure with -DFLASHBENCH_CUDA=ON)");
}
}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { no_cuda(); }

namespace cuda {
int device_count() { return 0; }
StackResult run_stack_once(Variant, const Problem&, const std::vector<float>&, const std::vector<float>&) { no_cuda(); }
}  // namespace cuda

}  // namespace flashbench
