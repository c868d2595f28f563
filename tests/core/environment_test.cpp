// The host environment a run records and warns about, read from fake /proc and /sys trees and an
// injected environment: every field this machine could give is set by the test, never read from it.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "flashbench/core/environment.hpp"

namespace flashbench {
namespace {

namespace fs = std::filesystem;

// A scratch root with the given files (path relative to the root -> contents); removed at the end.
class FakeRoot {
 public:
  explicit FakeRoot(const std::map<std::string, std::string>& files) {
    root_ = fs::temp_directory_path() / (std::string("flashbench-environment-") +
                                         testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
                                         std::to_string(::getpid()));
    fs::remove_all(root_);
    for (const auto& [path, contents] : files) {
      fs::create_directories((root_ / path).parent_path());
      std::ofstream(root_ / path) << contents;
    }
    fs::create_directories(root_);
  }
  ~FakeRoot() { fs::remove_all(root_); }
  EnvironmentSource source(std::map<std::string, std::string> variables = {}) const {
    EnvironmentSource source;
    source.root = root_;
    source.variable = [variables](const std::string& name) -> std::optional<std::string> {
      const auto found = variables.find(name);
      return found == variables.end() ? std::nullopt : std::optional<std::string>(found->second);
    };
    return source;
  }

 private:
  fs::path root_;
};

const std::string kCpu = "sys/devices/system/cpu/";

TEST(Environment, ReadsEveryFieldFromTheTree) {
  const FakeRoot root({{"proc/loadavg", "3.50 2.25 1.00 2/300 4242\n"},
                       {kCpu + "online", "0-3,8-11\n"},
                       {kCpu + "cpu0/cpufreq/scaling_governor", "performance\n"},
                       {kCpu + "cpu1/cpufreq/scaling_governor", "performance\n"},
                       {kCpu + "cpufreq/boost", "0\n"},
                       {kCpu + "smt/active", "1\n"},
                       {kCpu + "smt/control", "on\n"}});
  const HostEnvironment env =
      read_host_environment(root.source({{"OMP_PROC_BIND", "close"}, {"OMP_PLACES", "cores"}}));
  ASSERT_TRUE(env.load_average);
  EXPECT_DOUBLE_EQ((*env.load_average)[0], 3.5);
  EXPECT_DOUBLE_EQ((*env.load_average)[1], 2.25);
  EXPECT_DOUBLE_EQ((*env.load_average)[2], 1.0);
  EXPECT_EQ(env.logical_cpus, 8);
  EXPECT_EQ(env.governors, std::vector<std::string>{"performance"});
  EXPECT_EQ(env.boost, false);
  EXPECT_EQ(env.boost_source, kCpu + "cpufreq/boost");
  EXPECT_EQ(env.smt_active, true);
  EXPECT_EQ(env.smt_control, "on");
  EXPECT_EQ(env.omp_proc_bind, "close");
  EXPECT_EQ(env.omp_places, "cores");
  EXPECT_TRUE(environment_warnings(env).empty());  // 3.5 < 8 CPUs, performance
}

TEST(Environment, AbsentFilesStayAbsent) {
  const FakeRoot root({});
  const HostEnvironment env = read_host_environment(root.source());
  EXPECT_FALSE(env.load_average);
  EXPECT_FALSE(env.logical_cpus);
  EXPECT_TRUE(env.governors.empty());
  EXPECT_FALSE(env.boost);
  EXPECT_FALSE(env.smt_active);
  EXPECT_FALSE(env.smt_control);
  EXPECT_FALSE(env.omp_proc_bind);
  EXPECT_FALSE(env.omp_places);
  EXPECT_TRUE(environment_warnings(env).empty());  // nothing known, nothing claimed
  const nlohmann::ordered_json j = to_json(env);
  for (const char* key : {"load_average_start", "load_average_end", "logical_cpus", "cpu_governors", "cpu_boost",
                          "smt_active", "smt_control", "omp_proc_bind", "omp_places"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_TRUE(j.at(key).is_null()) << key;
  }
}

TEST(Environment, IntelPstateNoTurboIsBoostInverted) {
  const FakeRoot root({{kCpu + "intel_pstate/no_turbo", "1\n"}});
  const HostEnvironment env = read_host_environment(root.source());
  EXPECT_EQ(env.boost, false);
  EXPECT_EQ(env.boost_source, kCpu + "intel_pstate/no_turbo");
  const FakeRoot turbo({{kCpu + "intel_pstate/no_turbo", "0\n"}});
  EXPECT_EQ(read_host_environment(turbo.source()).boost, true);
}

TEST(Environment, MalformedFilesAreAbsentNotGuessed) {
  const FakeRoot root({{"proc/loadavg", "busy\n"}, {kCpu + "online", "3-1\n"}, {kCpu + "smt/active", "maybe\n"}});
  const HostEnvironment env = read_host_environment(root.source());
  EXPECT_FALSE(env.load_average);
  EXPECT_FALSE(env.logical_cpus);
  EXPECT_FALSE(env.smt_active);
}

TEST(Environment, WarnsOnAGovernorOtherThanPerformance) {
  const FakeRoot root({{kCpu + "online", "0-1\n"},
                       {kCpu + "cpu0/cpufreq/scaling_governor", "powersave\n"},
                       {kCpu + "cpu1/cpufreq/scaling_governor", "performance\n"}});
  const HostEnvironment env = read_host_environment(root.source());
  EXPECT_EQ(env.governors, (std::vector<std::string>{"performance", "powersave"}));
  const std::vector<std::string> warnings = environment_warnings(env);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("'powersave'"), std::string::npos) << warnings[0];
}

TEST(Environment, WarnsWhenTheLoadExceedsTheCpus) {
  const FakeRoot busy({{"proc/loadavg", "4.50 1.0 1.0 1/1 1\n"}, {kCpu + "online", "0-3\n"}});
  const std::vector<std::string> warnings = environment_warnings(read_host_environment(busy.source()));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("4.50"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("4 logical CPUs"), std::string::npos) << warnings[0];
  // At the number of CPUs exactly, every CPU is busy but none is shared: no warning.
  const FakeRoot full({{"proc/loadavg", "4.00 9.0 9.0 1/1 1\n"}, {kCpu + "online", "0-3\n"}});
  EXPECT_TRUE(environment_warnings(read_host_environment(full.source())).empty());
}

// The start warning reads the probe where there is one: a load average that an earlier run left
// behind, with nothing running now, is no warning; other processes busy now are one.
TEST(Environment, WarnsOnOtherProcessesBusyNowNotOnTheLoadAverageOfEarlierRuns) {
  HostEnvironment env;
  env.logical_cpus = 2;
  env.load_average = std::array<double, 3>{3.9, 1.2, 0.5};  // the last minute's own run of flashbench
  env.others_busy_cpus = 0.05;
  EXPECT_TRUE(environment_warnings(env).empty());
  env.others_busy_cpus = 0.9;
  env.load_average = std::array<double, 3>{0.1, 0.1, 0.1};  // a load that just began
  const std::vector<std::string> warnings = environment_warnings(env);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("0.9 of the 2 logical CPUs busy"), std::string::npos) << warnings[0];
  env.logical_cpus = 64;  // a tenth of a big machine's CPUs before it counts
  env.others_busy_cpus = 5.0;
  EXPECT_TRUE(environment_warnings(env).empty());
  // The probe runs on the real /proc: a number of CPUs from 0 up.
  const HostEnvironment here = read_host_environment(EnvironmentSource::system(), std::chrono::milliseconds(20));
  if (here.others_busy_cpus) {
    EXPECT_GE(*here.others_busy_cpus, 0.0);
  }
}

}  // namespace
}  // namespace flashbench
