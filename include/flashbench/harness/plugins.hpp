#pragma once
// Implementations from shared libraries (include/flashbench/plugin.h, docs/plugins.md): loaded at
// run time, each joins the registry of its device and runs by `--impl NAME` like a built-in one. A
// library is opened once and never closed: its implementations live as long as the process.
#include <string>
#include <vector>

#include "flashbench/core/variant.hpp"

namespace flashbench {

// What a loaded plugin offers, for `info --plugin`.
struct PluginOffer {
  std::string name;     // for --impl
  std::string device;   // the registry's: "cpu", "cuda"
  Variant variant;      // whose statement of kept tensors it uses
  std::string summary;
};
struct PluginDescription {
  std::string path;  // as given
  std::string name;  // the plugin's own
  unsigned abi_version = 0;
  std::vector<PluginOffer> implementations;
};

// Loads the library at `path`, checks its entry point, ABI version and description, and adds its
// implementations to their devices' registries. A path loaded before is not loaded again (its
// description is returned). Throws UsageError in one line: no such library, no entry point, another
// ABI version, a malformed description, a name another implementation of the device has.
PluginDescription load_plugin(const std::string& path);

// The libraries FLASHBENCH_PLUGINS names (colon-separated), then `paths` (--plugin), in order.
std::vector<PluginDescription> load_plugins(const std::vector<std::string>& paths);

}  // namespace flashbench
