// libFuzzer target: a sweep file (--config) as `run` reads it, then its expansion into problems.
// Anything but a UsageError naming what was wrong is a defect (a crash, a sanitizer report, a hang).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/sweep.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const flashbench::SweepSpec spec = flashbench::parse_sweep_json(text, "fuzz.json");
    flashbench::validate(spec.sampling);
    (void)flashbench::expand(spec);
  } catch (const flashbench::UsageError&) {
  }
  return 0;
}
