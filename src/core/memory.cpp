#include "flashbench/memory.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "flashbench/errors.hpp"

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

void MemoryLedger::record_allocation(Tag tag, int64_t bytes) {
  live_[tag] += bytes;
  if (live_[tag] > high_water_[tag]) high_water_[tag] = live_[tag];
  const int64_t total = live_.total();
  if (total > peak_bytes_) {
    peak_bytes_ = total;
    at_peak_ = live_;
    peak_phase_ = phase_;
  }
}

void MemoryLedger::record_release(Tag tag, int64_t bytes) { live_[tag] -= bytes; }

void MemoryLedger::reset_peaks() {
  high_water_ = live_;
  at_peak_ = live_;
  peak_bytes_ = live_.total();
  peak_phase_ = phase_;
}

void* HostAllocator::allocate(Tag tag, int64_t bytes) {
  if (bytes < 0) throw RuntimeFailure(fmt::format("negative allocation of {} bytes", bytes));
  if (ledger_->would_exceed_limit(bytes))
    throw OutOfMemory(fmt::format("{} bytes for '{}' exceed the memory limit of {} bytes", bytes,
                                  to_string(tag), ledger_->limit_bytes()));
  constexpr std::size_t kAlignment = 64;
  const std::size_t rounded = (static_cast<std::size_t>(bytes) + kAlignment - 1) / kAlignment * kAlignment;
  void* pointer = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!pointer) throw OutOfMemory(fmt::format("the system refused {} bytes for '{}'", bytes, to_string(tag)));
  ledger_->record_allocation(tag, bytes);
  return pointer;
}

void HostAllocator::release(void* pointer, Tag tag, int64_t bytes) noexcept {
  std::free(pointer);
  ledger_->record_release(tag, bytes);
}

}  // namespace flashbench
