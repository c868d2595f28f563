#pragma once
// What of the host's state bends timings, recorded in the results' meta and warned about (Google
// Benchmark's CPU-scaling warning): load average at the start and end of the run, the CPU frequency
// governor and boost, simultaneous multithreading, and OpenMP's binding. Each value is read where
// the system offers it (Linux /proc and /sys) and is absent otherwise: nothing is guessed.
// GPU clocks, power and throttling are per row (gpu_state.hpp).
#include <array>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashbench {

// Where the environment is read from: files under `root` (a test points it at a fake tree), the
// process's environment variables through `variable`.
struct EnvironmentSource {
  std::filesystem::path root = "/";
  std::function<std::optional<std::string>(const std::string& name)> variable;
  static EnvironmentSource system();  // "/" and getenv
};

struct HostEnvironment {
  std::optional<std::array<double, 3>> load_average;  // 1, 5, 15 minutes (/proc/loadavg)
  std::optional<int> logical_cpus;                    // online CPUs (/sys/devices/system/cpu/online)
  std::vector<std::string> governors;                 // distinct cpufreq scaling_governor values; empty: absent
  std::optional<bool> boost;                          // turbo / boost enabled
  std::optional<std::string> boost_source;            // the file it was read from, relative to the root
  std::optional<bool> smt_active;                     // /sys/devices/system/cpu/smt/active
  std::optional<std::string> smt_control;             // on, off, forceoff, notsupported, notimplemented
  std::optional<std::string> omp_proc_bind, omp_places;  // OMP_PROC_BIND, OMP_PLACES as set
  // The CPUs other processes kept busy over a short probe at the start (/proc/stat less this
  // process): the load now, where the load average still carries minutes of what ran before (an
  // earlier run of flashbench, say). Absent without /proc/stat.
  std::optional<double> others_busy_cpus;
};

// Reads the host's state; `probe` is how long others_busy_cpus is measured over (zero: not measured).
HostEnvironment read_host_environment(const EnvironmentSource& source,
                                      std::chrono::milliseconds probe = std::chrono::milliseconds(200));
std::optional<std::array<double, 3>> read_load_average(const EnvironmentSource& source);

// CPU time the whole machine and this process had used at one moment, and when: two of them tell
// the load other processes put on the machine during a run from the run's own, which the load
// average cannot (it still carries, for minutes, what an earlier run of flashbench did).
struct CpuTimes {
  double machine_busy_s = 0;  // all CPUs, not idle (/proc/stat's first line)
  double own_s = 0;           // this process, every thread, user and system (getrusage)
  double wall_s = 0;          // a steady clock
};
std::optional<CpuTimes> read_cpu_times(const EnvironmentSource& source);
// The CPUs other processes kept busy on average from `start` to `end`: (machine busy - own) / wall,
// at least 0; nullopt when no time passed.
std::optional<double> other_cpu_load(const CpuTimes& start, const CpuTimes& end);

// One sentence each: a governor other than `performance`; other processes busy at the start (by the
// probe: at least half a CPU, or a tenth of the CPUs where that is more; without the probe, a
// 1-minute load average above the number of logical CPUs).
std::vector<std::string> environment_warnings(const HostEnvironment& start);

// meta.environment: every field, null where the system did not say; load_average_end and
// other_cpu_load are filled in at the end of the run.
nlohmann::ordered_json to_json(const HostEnvironment& environment);
nlohmann::ordered_json load_average_json(const std::optional<std::array<double, 3>>& load);

}  // namespace flashbench
