#pragma once
// Every device this binary was built with, and their implementations, by name. The command line
// asks the registry; it names no device or variant in its code. Each device folder defines one
// registration function; the build lists them (CMake writes the call to each into one generated
// file), so adding a device touches no existing C++ source: the build's FLASHBENCH_DEVICES and the
// tests' folder list name it (docs/architecture.md counts the rest).
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashbench/core/peak.hpp"
#include "flashbench/harness/device.hpp"
#include "flashbench/harness/implementation.hpp"

namespace flashbench {

struct DeviceEntry {
  std::string name;     // "cpu", "cuda"
  std::string summary;  // one line for `info` and errors
  // Opens the device; throws UsageError where it is absent (no GPU, built without CUDA).
  std::function<std::unique_ptr<Device>(const DeviceOptions&)> open;
  // The model's device parameters without opening it (`model`, `fit`): the machine's own where it
  // can tell, stated defaults otherwise.
  std::function<ModelParams(const Problem&, const DeviceOptions&)> offline_params;
  // Its implementations; the first one of each variant is that variant's default.
  std::function<std::vector<std::unique_ptr<Implementation>>()> implementations;
  // Measures its compute ceilings with `threads` workers on an n×n×n product (and, with `products`,
  // the attention kernels' product shapes), for rates read as % of peak; empty where the device
  // has none to offer.
  std::function<PeakReport(int threads, int64_t n, bool products)> measure_peak;
  // Where its kernels come in several instruction sets (the CPU: cpu/isa.hpp): runs them on the one
  // named from now on (a usage error naming `source` where the machine lacks it or the name is none),
  // the help text of --isa and the names it takes (for shell completion). Empty elsewhere.
  std::function<void(std::string_view name, std::string_view source)> choose_isa;
  std::function<std::string()> isa_help;
  std::vector<std::string> isa_names;
  // A round rate of this kind of device [FLOP/s] for the modelled time that deals a sweep to shards
  // (modelled_run_seconds): a constant, not this machine's, so that every shard deals alike.
  double nominal_flop_rate = 1e11;
};

class Registry {
 public:
  void add(DeviceEntry entry);
  const DeviceEntry& device(std::string_view name) const;  // throws UsageError naming the known ones
  const std::vector<DeviceEntry>& devices() const { return devices_; }
  // Their names joined for help text and errors: "cpu or cuda" (last_separator " or "), "cpu" in a
  // build without CUDA.
  std::string device_names(std::string_view last_separator = " or ") const;
  // The first device that measures its ceilings (the CPU); throws UsageError when none does.
  const DeviceEntry& device_with_peak() const;
  // The first device whose kernels come in several instruction sets (the CPU); nullptr when none.
  const DeviceEntry* device_with_isa() const;
  // Adds an implementation made at run time (a plugin's, plugins.hpp) to the device called `device`,
  // after those it has; throws UsageError on an unknown device.
  void add_implementation(std::string_view device, std::function<std::unique_ptr<Implementation>()> make);

 private:
  std::vector<DeviceEntry> devices_;
};

// The registry of this binary, filled on first use.
const Registry& registry();

// The same registry, for what joins it at run time (plugins.hpp): nothing else changes it.
Registry& extensible_registry();

// Picks implementations by name ("v2.split") or by variant ("v2" → the variant's default), in the
// order asked; throws UsageError on an unknown name, listing the known ones.
std::vector<std::unique_ptr<Implementation>> select_implementations(const DeviceEntry& device,
                                                                    const std::vector<std::string>& names);

// The model of a device's default implementations, for `model`, `fit` and the presets; with
// context_parallel = P > 1, one device's of P under ring attention (model_context_parallel).
ModelSource model_source(const DeviceEntry& device, const DeviceOptions& options, int64_t context_parallel = 1);

}  // namespace flashbench
