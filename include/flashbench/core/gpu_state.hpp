#pragma once
// A GPU's clocks, power, temperature and throttling at one moment, read through NVML (the NVIDIA
// Management Library, which the driver installs as libnvidia-ml.so.1). The library is opened at run
// time (dlopen), so a build without it, or a machine without a GPU, runs as before and says why
// nothing was read. A CUDA row records the state at the start and the end of its timed samples;
// a warning follows the row when the GPU throttled in between (nvbench reports the same).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashbench {

struct GpuState {
  std::optional<unsigned> sm_clock_mhz, memory_clock_mhz;
  std::optional<unsigned> max_sm_clock_mhz;  // the highest SM clock the GPU runs at
  std::optional<unsigned> power_mw, power_limit_mw;  // draw now and the enforced limit [mW]
  std::optional<unsigned> temperature_c;
  // Why the clocks are below their maximum now: NVML's clocks event (throttle) reason bits.
  std::optional<uint64_t> clock_event_reasons;
  // Cumulative time the clocks were held down by the power and the thermal limits since the driver
  // loaded [ns]: the difference between two states is the throttling in between, however short.
  std::optional<uint64_t> power_violation_ns, thermal_violation_ns;
};

// The state of the GPU whose PCI bus id is `pci_bus_id` ("0000:19:00.0", as cudaDeviceGetPCIBusId
// writes it), or nothing with `why_not` saying why (no libnvidia-ml.so.1, NVML failed to start,
// no such GPU). Each field is absent where NVML does not report it on this GPU.
std::optional<GpuState> read_gpu_state(std::string_view pci_bus_id, std::string& why_not);

// NVML's names of the reason bits set in `reasons` ("sw_power_cap", "hw_thermal_slowdown", ...).
std::vector<std::string> clock_event_reason_names(uint64_t reasons);

// A sentence when the GPU throttled between `start` and `end`: the power or thermal violation
// time grew, or a power / thermal / hardware slowdown reason is set at the end. Idle, the
// application clocks setting, sync boost and the display clock are not throttling.
std::optional<std::string> throttle_warning(const GpuState& start, const GpuState& end);

// Whether a sample ran throttled, from the states read just before and just after it: a power or
// thermal violation time grew in between, a power / thermal / hardware slowdown reason is set after
// it, or the SM clock after it is below `threshold` x the maximum (the torch peers' rule,
// scripts/peers/timing.py is_throttled, with NVML's violation counters besides). Nothing where the
// states tell none of these.
std::optional<bool> sample_throttled(const GpuState& before, const GpuState& after, double threshold);

}  // namespace flashbench
