#include "flashbench/core/timeline.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace flashbench {

MemoryTimeline::MemoryTimeline(const TagBytes& live_at_start)
    : origin_(std::chrono::steady_clock::now()), live_at_start_(live_at_start) {}

int64_t MemoryTimeline::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
}

void MemoryTimeline::record(Tag tag, int64_t delta_bytes, Phase phase, const void* address) {
  int64_t time = now_ns();
  if (!events_.empty()) time = std::max(time, events_.back().time_ns + 1);
  else time = std::max<int64_t>(time, 1);  // time 0 holds the live bytes at the start
  MemoryEvent event{time, tag, delta_bytes, phase};
  if (address) {
    if (delta_bytes > 0) {
      event.buffer = next_buffer_++;
      live_buffers_[address] = event.buffer;  // an address reused after its release is a new buffer
    } else if (const auto found = live_buffers_.find(address); found != live_buffers_.end()) {
      event.buffer = found->second;
      live_buffers_.erase(found);
    } else {
      event.buffer = next_buffer_++;
      event.before_start = true;
    }
  }
  events_.push_back(event);
}

void MemoryTimeline::begin_span(std::string name, std::string category) {
  const int64_t time = now_ns();
  open_spans_.push_back(spans_.size());
  spans_.push_back({std::move(name), std::move(category), time, time});
}

void MemoryTimeline::end_span() {
  if (open_spans_.empty()) return;
  spans_[open_spans_.back()].end_ns = now_ns();
  open_spans_.pop_back();
}

ScopedSpan::ScopedSpan(MemoryTimeline* timeline, std::string_view category, int64_t layer) : timeline_(timeline) {
  if (!timeline_) return;
  timeline_->begin_span(layer < 0 ? std::string(category) : fmt::format("{} layer {}", category, layer),
                        std::string(category));
}

}  // namespace flashbench
