// The run's metadata: what was run, by which build, on which machine, when.
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include <omp.h>

#include "flashbench/report/config.hpp"
#include "flashbench/report/json.hpp"

#ifndef FLASHBENCH_CXX_FLAGS
#define FLASHBENCH_CXX_FLAGS ""
#endif

namespace flashbench {

namespace {

std::string trim(std::string text) {
  const auto first = text.find_first_not_of(" \t");
  const auto last = text.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
}

// "model name" from /proc/cpuinfo (x86), or "unknown".
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(line.substr(0, colon)) == "model name") return trim(line.substr(colon + 1));
  }
  return "unknown";
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

nlohmann::ordered_json make_meta(const std::vector<std::string>& argv) {
  nlohmann::ordered_json meta;
  meta["tool"] = build::kName;
  meta["version"] = build::kVersion;
  meta["git"] = build::kGitRevision;
  meta["build"]["type"] = build::kBuildType;
  meta["build"]["compiler"] = build::kCompiler;
  meta["build"]["flags"] = trim(FLASHBENCH_CXX_FLAGS);
  meta["build"]["native"] = build::kNative;
  meta["build"]["cuda"] = build::kCuda;
  meta["host"]["cpu"] = cpu_model();
  meta["host"]["cores"] = std::thread::hardware_concurrency();
  meta["host"]["omp_threads"] = omp_get_max_threads();
  meta["host"]["hostname"] = host_name();
  meta["time"] = utc_now_iso8601();
  meta["argv"] = argv;
  return meta;
}

}  // namespace flashbench
