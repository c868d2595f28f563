#include "flashbench/harness/registry.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"

namespace flashbench {

void Registry::add(DeviceEntry entry) { devices_.push_back(std::move(entry)); }

const DeviceEntry& Registry::device(std::string_view name) const {
  for (const DeviceEntry& entry : devices_)
    if (entry.name == name) return entry;
  throw UsageError(fmt::format("unknown backend '{}' (expected {})", name, device_names()));
}

std::string Registry::device_names(std::string_view last_separator) const {
  std::vector<std::string> names;
  for (const DeviceEntry& entry : devices_) names.push_back(entry.name);
  return listed(names, last_separator);
}

const DeviceEntry& Registry::device_with_peak() const {
  for (const DeviceEntry& entry : devices_)
    if (entry.measure_peak) return entry;
  throw UsageError("no backend of this build measures its ceilings");
}

const DeviceEntry* Registry::device_with_isa() const {
  for (const DeviceEntry& entry : devices_)
    if (entry.choose_isa) return &entry;
  return nullptr;
}

void Registry::add_implementation(std::string_view device, std::function<std::unique_ptr<Implementation>()> make) {
  const auto found = std::find_if(devices_.begin(), devices_.end(), [&](const DeviceEntry& e) { return e.name == device; });
  if (found == devices_.end()) this->device(device);  // throws, naming the known ones
  DeviceEntry& entry = *found;
  entry.implementations = [earlier = std::move(entry.implementations), make = std::move(make)] {
    std::vector<std::unique_ptr<Implementation>> all = earlier();
    all.push_back(make());
    return all;
  };
}

std::vector<std::unique_ptr<Implementation>> select_implementations(const DeviceEntry& device,
                                                                    const std::vector<std::string>& names) {
  std::vector<std::unique_ptr<Implementation>> chosen;
  for (const std::string& name : names) {
    std::vector<std::unique_ptr<Implementation>> all = device.implementations();
    auto by_name = std::find_if(all.begin(), all.end(), [&](const auto& i) { return i->name() == name; });
    if (by_name == all.end())  // a variant's name picks its first implementation
      by_name = std::find_if(all.begin(), all.end(), [&](const auto& i) { return to_string(i->variant()) == name; });
    if (by_name == all.end()) {
      std::vector<std::string_view> known;
      for (const auto& i : all) known.push_back(i->name());
      throw UsageError(fmt::format("no implementation '{}' on {} (known: {})", name, device.name, fmt::join(known, ", ")));
    }
    chosen.push_back(std::move(*by_name));
  }
  return chosen;
}

ModelSource model_source(const DeviceEntry& device, const DeviceOptions& options, int64_t context_parallel) {
  auto costs_of = [&device](const Problem& problem, Variant variant, const ModelParams& params) {
    return select_implementations(device, {std::string(to_string(variant))}).front()->costs(problem, params);
  };
  ModelSource source;
  if (context_parallel > 1) {
    // The implementation and the device see one ring step: the local problem (seq = N/P).
    auto split = [&device, options, costs_of, context_parallel](const Problem& problem, Variant variant) {
      const Problem local = local_problem(problem, context_parallel);
      const ModelParams params = device.offline_params(local, options);
      return model_context_parallel(problem, context_parallel, variant, costs_of(local, variant, params), params);
    };
    source.layer = [split](const Problem& problem, Variant variant) { return split(problem, variant).layer; };
    source.stack = [split](const Problem& problem, Variant variant) { return split(problem, variant).per_device; };
    source.threads = device.offline_params(Problem{}, options).threads;
    return source;
  }
  source.layer = [&device, options, costs_of](const Problem& problem, Variant variant) {
    const ModelParams params = device.offline_params(problem, options);
    return layer_memory(problem, variant, costs_of(problem, variant, params), params);
  };
  source.stack = [&device, options, costs_of](const Problem& problem, Variant variant) {
    const ModelParams params = device.offline_params(problem, options);
    return model_memory(problem, variant, costs_of(problem, variant, params), params);
  };
  source.threads = device.offline_params(Problem{}, options).threads;
  return source;
}

}  // namespace flashbench
