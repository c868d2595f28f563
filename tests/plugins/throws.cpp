// A plugin in C++ whose forward throws: the exception must end as a failed row naming it, never
// cross into the sweep. Its backward is never reached.
#include <flashbench/plugin.h>

#include <stdexcept>

namespace {

int throwing_forward(const flashbench_problem*, const flashbench_call*, char*, size_t) {
  throw std::runtime_error("out of tiles");
}

int unreachable_backward(const flashbench_problem*, const flashbench_call*, char*, size_t) { return 1; }

const flashbench_implementation implementations[] = {
    {"throws.cpp", "forward throws std::runtime_error", FLASHBENCH_DEVICE_CPU, FLASHBENCH_VARIANT_CHECKPOINT, nullptr,
     nullptr, throwing_forward, unreachable_backward},
};

}  // namespace

extern "C" const flashbench_plugin_info* flashbench_plugin(void) {
  static const flashbench_plugin_info info = {FLASHBENCH_PLUGIN_ABI_VERSION, "throws", 1, implementations};
  return &info;
}
