#include "flashbench/core/environment.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace flashbench {

namespace {

namespace fs = std::filesystem;

// The first line of root/relative, trimmed; nullopt when it cannot be read.
std::optional<std::string> read_line(const EnvironmentSource& source, const fs::path& relative) {
  std::ifstream file(source.root / relative);
  std::string line;
  if (!file || !std::getline(file, line)) return std::nullopt;
  const auto last = line.find_last_not_of(" \t\r\n");
  return last == std::string::npos ? std::string() : line.substr(0, last + 1);
}

std::optional<bool> read_flag(const EnvironmentSource& source, const fs::path& relative) {
  const std::optional<std::string> text = read_line(source, relative);
  if (text == "1") return true;
  if (text == "0") return false;
  return std::nullopt;
}

// "0-3,8-11" -> 8; nullopt on anything else.
std::optional<int> count_cpu_list(const std::string& list) {
  int count = 0;
  std::stringstream parts(list);
  std::string part;
  while (std::getline(parts, part, ',')) {
    int first = 0, last = 0;
    char dash = 0;
    std::istringstream range(part);
    if (!(range >> first)) return std::nullopt;
    if (range >> dash) {
      if (dash != '-' || !(range >> last) || last < first) return std::nullopt;
    } else {
      last = first;
    }
    count += last - first + 1;
  }
  return count > 0 ? std::optional<int>(count) : std::nullopt;
}

const fs::path kCpuDirectory = "sys/devices/system/cpu";

std::vector<std::string> read_governors(const EnvironmentSource& source) {
  std::vector<std::string> governors;
  std::error_code error;
  const fs::path cpus = source.root / kCpuDirectory;
  for (fs::directory_iterator it(cpus, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!std::regex_match(name, std::regex("cpu[0-9]+"))) continue;
    const std::optional<std::string> governor = read_line(source, kCpuDirectory / name / "cpufreq/scaling_governor");
    if (governor && !governor->empty() &&
        std::find(governors.begin(), governors.end(), *governor) == governors.end())
      governors.push_back(*governor);
  }
  std::sort(governors.begin(), governors.end());
  return governors;
}

}  // namespace

EnvironmentSource EnvironmentSource::system() {
  EnvironmentSource source;
  source.variable = [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  return source;
}

std::optional<std::array<double, 3>> read_load_average(const EnvironmentSource& source) {
  const std::optional<std::string> line = read_line(source, "proc/loadavg");
  if (!line) return std::nullopt;
  std::istringstream fields(*line);
  std::array<double, 3> load{};
  if (!(fields >> load[0] >> load[1] >> load[2])) return std::nullopt;
  return load;
}

std::optional<CpuTimes> read_cpu_times(const EnvironmentSource& source) {
  const std::optional<std::string> line = read_line(source, "proc/stat");
  if (!line || line->rfind("cpu ", 0) != 0) return std::nullopt;
  // cpu user nice system idle iowait irq softirq steal (guest time is inside user already)
  std::istringstream fields(line->substr(4));
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(fields >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) return std::nullopt;
  if (!(fields >> steal)) steal = 0;
  const double ticks_per_s = double(sysconf(_SC_CLK_TCK));
  if (!(ticks_per_s > 0)) return std::nullopt;
  rusage own{};
  if (getrusage(RUSAGE_SELF, &own) != 0) return std::nullopt;
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  CpuTimes times;
  times.machine_busy_s = (user + nice + system + irq + softirq + steal) / ticks_per_s;
  times.own_s = seconds(own.ru_utime) + seconds(own.ru_stime);
  times.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return times;
}

std::optional<double> other_cpu_load(const CpuTimes& start, const CpuTimes& end) {
  const double wall = end.wall_s - start.wall_s;
  if (!(wall > 0)) return std::nullopt;
  const double other = (end.machine_busy_s - start.machine_busy_s) - (end.own_s - start.own_s);
  return std::max(0.0, other / wall);
}

HostEnvironment read_host_environment(const EnvironmentSource& source, std::chrono::milliseconds probe) {
  HostEnvironment env;
  env.load_average = read_load_average(source);
  if (probe.count() > 0)
    if (const std::optional<CpuTimes> before = read_cpu_times(source)) {
      std::this_thread::sleep_for(probe);
      if (const std::optional<CpuTimes> after = read_cpu_times(source)) env.others_busy_cpus = other_cpu_load(*before, *after);
    }
  if (const auto online = read_line(source, kCpuDirectory / "online")) env.logical_cpus = count_cpu_list(*online);
  env.governors = read_governors(source);
  // acpi-cpufreq (and amd-pstate) say "boost" 1/0; intel_pstate says the opposite, "no_turbo".
  if (const auto boost = read_flag(source, kCpuDirectory / "cpufreq/boost")) {
    env.boost = *boost;
    env.boost_source = (kCpuDirectory / "cpufreq/boost").string();
  } else if (const auto no_turbo = read_flag(source, kCpuDirectory / "intel_pstate/no_turbo")) {
    env.boost = !*no_turbo;
    env.boost_source = (kCpuDirectory / "intel_pstate/no_turbo").string();
  }
  env.smt_active = read_flag(source, kCpuDirectory / "smt/active");
  env.smt_control = read_line(source, kCpuDirectory / "smt/control");
  if (source.variable) {
    env.omp_proc_bind = source.variable("OMP_PROC_BIND");
    env.omp_places = source.variable("OMP_PLACES");
  }
  return env;
}

std::vector<std::string> environment_warnings(const HostEnvironment& start) {
  std::vector<std::string> warnings;
  for (const std::string& governor : start.governors)
    if (governor != "performance")
      warnings.push_back(fmt::format("the CPU frequency governor is '{}', not 'performance': the clock moves with "
                                     "the load, and timings with it",
                                     governor));
  if (start.others_busy_cpus && start.logical_cpus) {
    if (*start.others_busy_cpus >= std::max(0.5, 0.1 * *start.logical_cpus))
      warnings.push_back(fmt::format("other processes kept {:.1f} of the {} logical CPUs busy at the start: they "
                                     "compete with the run, and timings are slower and noisier",
                                     *start.others_busy_cpus, *start.logical_cpus));
  } else if (start.load_average && start.logical_cpus && (*start.load_average)[0] > *start.logical_cpus)
    warnings.push_back(fmt::format("the load average at the start ({:.2f}) exceeds the {} logical CPUs: other "
                                   "processes compete for them, and timings are slower and noisier",
                                   (*start.load_average)[0], *start.logical_cpus));
  return warnings;
}

nlohmann::ordered_json load_average_json(const std::optional<std::array<double, 3>>& load) {
  if (!load) return nullptr;
  return {{"1m", (*load)[0]}, {"5m", (*load)[1]}, {"15m", (*load)[2]}};
}

nlohmann::ordered_json to_json(const HostEnvironment& env) {
  using nlohmann::ordered_json;
  auto optional = [](const auto& value) { return value ? ordered_json(*value) : ordered_json(nullptr); };
  ordered_json j;
  j["load_average_start"] = load_average_json(env.load_average);
  j["load_average_end"] = nullptr;
  j["other_cpu_load"] = nullptr;
  j["others_busy_cpus_start"] = optional(env.others_busy_cpus);
  j["logical_cpus"] = optional(env.logical_cpus);
  j["cpu_governors"] = env.governors.empty() ? ordered_json(nullptr) : ordered_json(env.governors);
  j["cpu_boost"] = optional(env.boost);
  j["cpu_boost_source"] = optional(env.boost_source);
  j["smt_active"] = optional(env.smt_active);
  j["smt_control"] = optional(env.smt_control);
  j["omp_proc_bind"] = optional(env.omp_proc_bind);
  j["omp_places"] = optional(env.omp_places);
  return j;
}

}  // namespace flashbench
