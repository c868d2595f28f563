// NVML's view of the GPU: the throttle warning fires on injected states (violation time that grew,
// a throttling reason at the end) and not on benign ones; rows carry the states in their JSON; and
// asking NVML for a GPU that is on no machine reads nothing and says why, with or without NVML.
#include <string>

#include <gtest/gtest.h>

#include "flashbench/core/gpu_state.hpp"
#include "flashbench/core/result.hpp"
#include "flashbench/report/json.hpp"

namespace flashbench {
namespace {

GpuState steady() {
  GpuState state;
  state.sm_clock_mhz = 1980;
  state.memory_clock_mhz = 3201;
  state.power_mw = 412000;
  state.power_limit_mw = 700000;
  state.temperature_c = 41;
  state.clock_event_reasons = 0;
  state.power_violation_ns = 5'000'000;
  state.thermal_violation_ns = 0;
  return state;
}

TEST(GpuState, ReasonNames) {
  EXPECT_EQ(clock_event_reason_names(0), std::vector<std::string>{});
  EXPECT_EQ(clock_event_reason_names(0x1 | 0x4 | 0x40),
            (std::vector<std::string>{"gpu_idle", "sw_power_cap", "hw_thermal_slowdown"}));
  EXPECT_EQ(clock_event_reason_names(0x1000), std::vector<std::string>{"unknown_0x1000"});
}

TEST(GpuState, ThrottleWarningFiresOnInjectedThrottling) {
  EXPECT_EQ(throttle_warning(steady(), steady()), std::nullopt);

  GpuState idle = steady();
  idle.clock_event_reasons = 0x1 | 0x2 | 0x10;  // idle, application clocks, sync boost: not throttling
  EXPECT_EQ(throttle_warning(steady(), idle), std::nullopt);

  GpuState power_capped = steady();
  *power_capped.power_violation_ns += 12'500'000;
  const std::optional<std::string> power = throttle_warning(steady(), power_capped);
  ASSERT_TRUE(power);
  EXPECT_NE(power->find("power limit for 12.5 ms"), std::string::npos) << *power;

  GpuState hot = steady();
  hot.clock_event_reasons = 0x20;
  const std::optional<std::string> thermal = throttle_warning(steady(), hot);
  ASSERT_TRUE(thermal);
  EXPECT_NE(thermal->find("sw_thermal_slowdown"), std::string::npos) << *thermal;

  GpuState unknown;  // NVML reported nothing: nothing to warn about
  EXPECT_EQ(throttle_warning(unknown, unknown), std::nullopt);
}

TEST(GpuState, RowsCarryTheStatesAndTheWarning) {
  Row row;
  row.backend = "cuda";
  row.gpu_start = steady();
  row.gpu_end = steady();
  row.gpu_end->clock_event_reasons = 0x4;
  row.gpu_end->temperature_c.reset();
  const auto j = row_to_json(row);
  ASSERT_TRUE(j.contains("gpu_state"));
  EXPECT_EQ(j["gpu_state"]["start"]["sm_clock_mhz"], 1980);
  EXPECT_DOUBLE_EQ(j["gpu_state"]["start"]["power_limit_w"].get<double>(), 700.0);
  EXPECT_TRUE(j["gpu_state"]["end"]["temperature_c"].is_null());
  EXPECT_EQ(j["gpu_state"]["end"]["clock_event_reasons"], nlohmann::ordered_json::array({"sw_power_cap"}));
  bool warned = false;
  for (const auto& warning : j["warnings"]) warned |= warning.get<std::string>().find("throttled") != std::string::npos;
  EXPECT_TRUE(warned) << j["warnings"].dump();

  Row cpu;
  EXPECT_FALSE(row_to_json(cpu).contains("gpu_state"));
}

TEST(GpuState, NoSuchGpuReadsNothingAndSaysWhy) {
  std::string why;
  EXPECT_EQ(read_gpu_state("0000:ff:1f.7", why), std::nullopt);
  EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace flashbench
