#include "flashbench/harness/device.hpp"

namespace flashbench {

void SteadyClockTimer::mark() { marks_.push_back(std::chrono::steady_clock::now()); }

std::vector<double> SteadyClockTimer::intervals_ms() {
  std::vector<double> out;
  for (size_t i = 1; i < marks_.size(); ++i)
    out.push_back(std::chrono::duration<double, std::milli>(marks_[i] - marks_[i - 1]).count());
  marks_.clear();
  return out;
}

void Device::occupy(double) {}
void Device::push_range(const std::string&) {}
void Device::pop_range() {}

DeviceRange::DeviceRange(Device& device, std::string name) : device_(device), open_(!name.empty()) {
  if (open_) device_.push_range(name);
}
DeviceRange::~DeviceRange() {
  if (open_) device_.pop_range();
}

}  // namespace flashbench
