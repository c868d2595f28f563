#include "flashbench/core/os_memory.hpp"

#include <malloc.h>

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace flashbench {

namespace {

// The value of a "Key:   1234 kB" line in a /proc file, in bytes. [bytes]
std::optional<int64_t> read_kib_field(const char* path, std::string_view key) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    if (line.size() <= key.size() || line.compare(0, key.size(), key) != 0 || line[key.size()] != ':') continue;
    std::istringstream fields(line.substr(key.size() + 1));
    int64_t value = 0;
    std::string unit;
    if (!(fields >> value)) return std::nullopt;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

}  // namespace

bool reset_peak_resident_bytes() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  if (!clear_refs) return false;
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

std::optional<int64_t> peak_resident_bytes() { return read_kib_field("/proc/self/status", "VmHWM"); }

std::optional<int64_t> resident_bytes() { return read_kib_field("/proc/self/status", "VmRSS"); }

void use_fresh_pages_for_large_blocks(int64_t threshold_bytes) {
  // Setting the threshold explicitly also turns off glibc's dynamic adjustment of it.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(threshold_bytes));
}

std::optional<int64_t> available_memory_bytes() { return read_kib_field("/proc/meminfo", "MemAvailable"); }

}  // namespace flashbench
