#include "flashbench/core/memory.hpp"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/os_memory.hpp"
#include "flashbench/core/timeline.hpp"

namespace flashbench {

std::string_view to_string(Tag tag) {
  switch (tag) {
    case Tag::input: return "input";
    case Tag::activation: return "activation";
    case Tag::kept: return "kept";
    case Tag::workspace: return "workspace";
    case Tag::grad: return "grad";
  }
  return "?";
}

std::string_view to_string(Phase phase) {
  switch (phase) {
    case Phase::setup: return "setup";
    case Phase::fwd: return "fwd";
    case Phase::bwd: return "bwd";
  }
  return "?";
}

int64_t TagBytes::total() const {
  int64_t sum = 0;
  for (int64_t b : bytes) sum += b;
  return sum;
}

void MemoryLedger::record_allocation(Tag tag, int64_t bytes, const void* address) {
  if (timeline_) timeline_->record(tag, bytes, phase_, address);
  live_[tag] += bytes;
  if (live_[tag] > high_water_[tag]) high_water_[tag] = live_[tag];
  const int64_t total = live_.total();
  if (total > peak_bytes_) {
    peak_bytes_ = total;
    at_peak_ = live_;
    peak_phase_ = phase_;
  }
}

void MemoryLedger::record_release(Tag tag, int64_t bytes, const void* address) {
  if (timeline_) timeline_->record(tag, -bytes, phase_, address);
  live_[tag] -= bytes;
}

void MemoryLedger::reset_peaks() {
  high_water_ = live_;
  at_peak_ = live_;
  peak_bytes_ = live_.total();
  peak_phase_ = phase_;
}

namespace {
constexpr int64_t kAlignment = 64;
int64_t rounded_size(int64_t bytes) { return std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment); }
}  // namespace

void MemorySpace::check_limit(Tag tag, int64_t bytes) const {
  if (bytes < 0) throw RuntimeFailure(fmt::format("negative allocation of {} bytes", bytes));
  if (ledger_->would_exceed_limit(bytes))
    throw OutOfMemory(fmt::format("{} bytes for '{}' exceed the memory limit of {} bytes", bytes,
                                  to_string(tag), ledger_->limit_bytes()));
}

HostSpace::~HostSpace() {
  for (auto& [size, pointer] : cache_) std::free(pointer);
}

int64_t HostSpace::cached_bytes() const {
  int64_t total = 0;
  for (const auto& [size, pointer] : cache_) total += size;
  return total;
}

void* HostSpace::allocate(Tag tag, int64_t bytes) {
  check_limit(tag, bytes);
  const int64_t size = rounded_size(bytes);
  void* pointer = nullptr;
  if (auto cached = cache_.find(size); cached != cache_.end()) {
    pointer = cached->second;
    cache_.erase(cached);
  } else {
    pointer = std::aligned_alloc(kAlignment, static_cast<std::size_t>(size));
    if (!pointer && !cache_.empty()) {  // give the cache back to the system and try once more
      for (auto& [cached_size, block] : cache_) std::free(block);
      cache_.clear();
      pointer = std::aligned_alloc(kAlignment, static_cast<std::size_t>(size));
    }
    if (!pointer) throw OutOfMemory(fmt::format("the system refused {} bytes for '{}'", bytes, to_string(tag)));
  }
  ledger().record_allocation(tag, bytes, pointer);
  return pointer;
}

void HostSpace::release(void* pointer, Tag tag, int64_t bytes) noexcept {
  try {
    cache_.emplace(rounded_size(bytes), pointer);
  } catch (...) {
    std::free(pointer);
  }
  ledger().record_release(tag, bytes, pointer);
}

void HostSpace::reset_os_peak() {
  resident_before_ = reset_peak_resident_bytes() ? resident_bytes() : std::nullopt;
}

std::optional<int64_t> HostSpace::os_peak_bytes() const {
  const std::optional<int64_t> peak = peak_resident_bytes();
  if (!resident_before_ || !peak) return std::nullopt;
  return *peak - *resident_before_;
}

}  // namespace flashbench
