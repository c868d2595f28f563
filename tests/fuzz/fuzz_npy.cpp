// libFuzzer target: a .npy file as `grad` reads it. Anything but a UsageError naming what was wrong
// is a defect (a crash, a sanitizer report, a hang, an allocation beyond the file's size).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)flashbench::parse_npy(bytes, "fuzz.npy");
  } catch (const flashbench::UsageError&) {
  }
  return 0;
}
