#pragma once
// The memory ledger's history, for `run --trace`: every allocation and release with its time and the
// spans (a layer's forward, its backward) that the harness marks, so that a viewer can draw memory
// over time beside what ran. Nothing is recorded unless a timeline is attached to a ledger: the
// timed samples never pay for it.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flashbench/core/memory.hpp"

namespace flashbench {

// One allocation (delta_bytes > 0) or release (< 0) under `tag`, `time_ns` after the timeline began.
// `buffer` numbers the buffer (0, 1, ... in order of first appearance) so that a release names the
// allocation it ends; a buffer allocated before the timeline began appears first at its release
// (`before_start`). Events recorded without an address have buffer -1.
struct MemoryEvent {
  int64_t time_ns = 0;
  Tag tag = Tag::workspace;
  int64_t delta_bytes = 0;
  Phase phase = Phase::setup;
  int64_t buffer = -1;
  bool before_start = false;
};

// A named stretch of host time [begin_ns, end_ns]; spans nest (a layer inside a pass).
struct TimelineSpan {
  std::string name;
  std::string category;  // "forward" or "backward"
  int64_t begin_ns = 0, end_ns = 0;
};

class MemoryTimeline {
 public:
  // Starts the clock; `live_at_start` is what the ledger holds at that moment (the inputs).
  explicit MemoryTimeline(const TagBytes& live_at_start);

  // Event times strictly increase (by 1 ns where the clock did not move), so that every viewer
  // orders the counter samples as they happened.
  void record(Tag tag, int64_t delta_bytes, Phase phase, const void* address = nullptr);
  void begin_span(std::string name, std::string category);
  void end_span();  // the innermost open span

  const TagBytes& live_at_start() const { return live_at_start_; }
  const std::vector<MemoryEvent>& events() const { return events_; }
  const std::vector<TimelineSpan>& spans() const { return spans_; }  // in order of their beginning

 private:
  int64_t now_ns() const;

  std::chrono::steady_clock::time_point origin_;
  TagBytes live_at_start_;
  std::vector<MemoryEvent> events_;
  std::vector<TimelineSpan> spans_;
  std::vector<size_t> open_spans_;  // indices into spans_ begun and not yet ended
  std::unordered_map<const void*, int64_t> live_buffers_;  // address -> buffer, allocated since the start
  int64_t next_buffer_ = 0;
};

// Marks a span for the lifetime of the object on `timeline`, when there is one (the name is built
// only then): "<category> layer <layer>", or the category alone when layer < 0.
class ScopedSpan {
 public:
  ScopedSpan(MemoryTimeline* timeline, std::string_view category, int64_t layer = -1);
  ~ScopedSpan() {
    if (timeline_) timeline_->end_span();
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  MemoryTimeline* timeline_;
};

}  // namespace flashbench
