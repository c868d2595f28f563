#include "flashbench/core/gpu_state.hpp"

#include <dlfcn.h>

#include <array>
#include <mutex>
#include <utility>

#include <fmt/format.h>

namespace flashbench {

namespace {

// The part of NVML's C interface used here, declared from its documentation (nvml.h is not needed
// to build): every call returns 0 on success.
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kClockSm = 1, kClockMemory = 2;            // nvmlClockType_t
constexpr int kTemperatureGpu = 0;                       // nvmlTemperatureSensors_t
constexpr int kPerfPolicyPower = 0, kPerfPolicyThermal = 1;  // nvmlPerfPolicyType_t
struct NvmlViolationTime {                               // nvmlViolationTime_t
  unsigned long long reference_time;
  unsigned long long violation_time;  // [ns]
};

// NVML's clocks event reason bits (nvmlClocksEventReason*), with the names its documentation uses.
constexpr std::array<std::pair<uint64_t, const char*>, 9> kReasons{{
    {0x1, "gpu_idle"},
    {0x2, "applications_clocks_setting"},
    {0x4, "sw_power_cap"},
    {0x8, "hw_slowdown"},
    {0x10, "sync_boost"},
    {0x20, "sw_thermal_slowdown"},
    {0x40, "hw_thermal_slowdown"},
    {0x80, "hw_power_brake_slowdown"},
    {0x100, "display_clock_setting"},
}};
constexpr uint64_t kKnownReasons = 0x1ff;
constexpr uint64_t kThrottling = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

struct Nvml {
  NvmlReturn (*init)();
  const char* (*error_string)(NvmlReturn);
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*);
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned*);
  NvmlReturn (*max_clock_info)(NvmlDevice, int, unsigned*);
  NvmlReturn (*power_usage)(NvmlDevice, unsigned*);
  NvmlReturn (*power_limit)(NvmlDevice, unsigned*);
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned*);
  NvmlReturn (*clock_event_reasons)(NvmlDevice, unsigned long long*);
  NvmlReturn (*violation_status)(NvmlDevice, int, NvmlViolationTime*);
};

// Opens and starts NVML once per process; later calls get the same answer. The library stays
// loaded (NVML is shut down by the driver when the process exits).
const Nvml* open_nvml(std::string& why_not) {
  static std::once_flag once;
  static std::optional<Nvml> nvml;
  static std::string failure;
  std::call_once(once, [] {
    void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      failure = "libnvidia-ml.so.1 (NVML, from the NVIDIA driver) is not installed";
      return;
    }
    auto symbol = [library](const char* name) { return dlsym(library, name); };
    Nvml n{};
    n.init = reinterpret_cast<decltype(n.init)>(symbol("nvmlInit_v2"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(symbol("nvmlErrorString"));
    n.handle_by_pci_bus_id = reinterpret_cast<decltype(n.handle_by_pci_bus_id)>(symbol("nvmlDeviceGetHandleByPciBusId_v2"));
    n.clock_info = reinterpret_cast<decltype(n.clock_info)>(symbol("nvmlDeviceGetClockInfo"));
    n.max_clock_info = reinterpret_cast<decltype(n.max_clock_info)>(symbol("nvmlDeviceGetMaxClockInfo"));
    n.power_usage = reinterpret_cast<decltype(n.power_usage)>(symbol("nvmlDeviceGetPowerUsage"));
    n.power_limit = reinterpret_cast<decltype(n.power_limit)>(symbol("nvmlDeviceGetEnforcedPowerLimit"));
    n.temperature = reinterpret_cast<decltype(n.temperature)>(symbol("nvmlDeviceGetTemperature"));
    // Renamed in CUDA 12.2's NVML ("clocks event"); older drivers have only the throttle name.
    void* reasons = symbol("nvmlDeviceGetCurrentClocksEventReasons");
    if (!reasons) reasons = symbol("nvmlDeviceGetCurrentClocksThrottleReasons");
    n.clock_event_reasons = reinterpret_cast<decltype(n.clock_event_reasons)>(reasons);
    n.violation_status = reinterpret_cast<decltype(n.violation_status)>(symbol("nvmlDeviceGetViolationStatus"));
    if (!n.init || !n.handle_by_pci_bus_id) {
      failure = "libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2";
      return;
    }
    if (const NvmlReturn status = n.init(); status != kNvmlSuccess) {
      failure = fmt::format("NVML did not start: {}", n.error_string ? n.error_string(status) : std::to_string(status));
      return;
    }
    nvml = n;
  });
  if (!nvml) why_not = failure;
  return nvml ? &*nvml : nullptr;
}

template <class Value, class Call>
std::optional<Value> ask(Call call) {
  Value value{};
  if (call(&value) != kNvmlSuccess) return std::nullopt;
  return value;
}

}  // namespace

std::optional<GpuState> read_gpu_state(std::string_view pci_bus_id, std::string& why_not) {
  const Nvml* nvml = open_nvml(why_not);
  if (!nvml) return std::nullopt;
  NvmlDevice device = nullptr;
  const std::string bus_id(pci_bus_id);
  if (const NvmlReturn status = nvml->handle_by_pci_bus_id(bus_id.c_str(), &device); status != kNvmlSuccess) {
    why_not = fmt::format("NVML knows no GPU at PCI bus id {}: {}", bus_id,
                          nvml->error_string ? nvml->error_string(status) : std::to_string(status));
    return std::nullopt;
  }
  GpuState state;
  if (nvml->clock_info) {
    state.sm_clock_mhz = ask<unsigned>([&](unsigned* v) { return nvml->clock_info(device, kClockSm, v); });
    state.memory_clock_mhz = ask<unsigned>([&](unsigned* v) { return nvml->clock_info(device, kClockMemory, v); });
  }
  if (nvml->max_clock_info)
    state.max_sm_clock_mhz = ask<unsigned>([&](unsigned* v) { return nvml->max_clock_info(device, kClockSm, v); });
  if (nvml->power_usage) state.power_mw = ask<unsigned>([&](unsigned* v) { return nvml->power_usage(device, v); });
  if (nvml->power_limit) state.power_limit_mw = ask<unsigned>([&](unsigned* v) { return nvml->power_limit(device, v); });
  if (nvml->temperature)
    state.temperature_c = ask<unsigned>([&](unsigned* v) { return nvml->temperature(device, kTemperatureGpu, v); });
  if (nvml->clock_event_reasons)
    if (auto reasons = ask<unsigned long long>([&](unsigned long long* v) { return nvml->clock_event_reasons(device, v); }))
      state.clock_event_reasons = *reasons;
  if (nvml->violation_status) {
    auto violation = [&](int policy) -> std::optional<uint64_t> {
      const auto time = ask<NvmlViolationTime>([&](NvmlViolationTime* v) { return nvml->violation_status(device, policy, v); });
      return time ? std::optional<uint64_t>(time->violation_time) : std::nullopt;
    };
    state.power_violation_ns = violation(kPerfPolicyPower);
    state.thermal_violation_ns = violation(kPerfPolicyThermal);
  }
  return state;
}

std::vector<std::string> clock_event_reason_names(uint64_t reasons) {
  std::vector<std::string> names;
  for (const auto& [bit, name] : kReasons)
    if (reasons & bit) names.emplace_back(name);
  if (reasons & ~kKnownReasons) names.push_back(fmt::format("unknown_{:#x}", reasons & ~kKnownReasons));
  return names;
}

std::optional<std::string> throttle_warning(const GpuState& start, const GpuState& end) {
  std::vector<std::string> parts;
  auto grew = [&parts](const std::optional<uint64_t>& before, const std::optional<uint64_t>& after, const char* what) {
    if (before && after && *after > *before)
      parts.push_back(fmt::format("held down by its {} limit for {:.1f} ms", what, double(*after - *before) / 1e6));
  };
  grew(start.power_violation_ns, end.power_violation_ns, "power");
  grew(start.thermal_violation_ns, end.thermal_violation_ns, "thermal");
  if (end.clock_event_reasons && (*end.clock_event_reasons & kThrottling)) {
    std::string names;
    for (const std::string& name : clock_event_reason_names(*end.clock_event_reasons & kThrottling))
      names += (names.empty() ? "" : ", ") + name;
    parts.push_back(fmt::format("throttling at the end ({})", names));
  }
  if (parts.empty()) return std::nullopt;
  std::string text = "the GPU throttled during the samples: ";
  for (size_t i = 0; i < parts.size(); ++i) text += (i ? "; " : "") + parts[i];
  return text;
}

std::optional<bool> sample_throttled(const GpuState& before, const GpuState& after, double threshold) {
  const auto grew = [](const std::optional<uint64_t>& a, const std::optional<uint64_t>& b) { return a && b && *b > *a; };
  if (grew(before.power_violation_ns, after.power_violation_ns) ||
      grew(before.thermal_violation_ns, after.thermal_violation_ns))
    return true;
  if (after.clock_event_reasons && (*after.clock_event_reasons & kThrottling)) return true;
  if (after.sm_clock_mhz && after.max_sm_clock_mhz && *after.max_sm_clock_mhz > 0)
    return double(*after.sm_clock_mhz) < threshold * double(*after.max_sm_clock_mhz);
  if (after.clock_event_reasons) return false;
  return std::nullopt;
}

}  // namespace flashbench
