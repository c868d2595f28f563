#pragma once
// Tests run once per ISA of the CPU kernels (cpu/isa.hpp): the ISA is the parameter, one this CPU
// cannot run is skipped by name, and the others run with their kernels active.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "flashbench/cpu/isa.hpp"

namespace flashbench::testing {

class EveryIsa : public ::testing::TestWithParam<cpu::Isa> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_supports(GetParam()))
      GTEST_SKIP() << "this CPU cannot run the " << cpu::isa_name(GetParam()) << " kernels";
    active_.emplace(GetParam());
  }
  void TearDown() override { active_.reset(); }

 private:
  std::optional<cpu::ScopedIsa> active_;
};

// The test's name suffix: the ISA's ("avx2").
inline std::string isa_test_name(const ::testing::TestParamInfo<cpu::Isa>& info) {
  return std::string(cpu::isa_name(info.param));
}

}  // namespace flashbench::testing
