#pragma once
// Tagged memory accounting. Every buffer a benchmark run allocates, on any backend, is recorded in
// a MemoryLedger under one of five tags, so the live bytes per tag, their high-water marks and the
// overall peak (with the tag split at that moment) are known exactly.
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

namespace flashbench {

enum class Tag { input, activation, kept, workspace, grad };
inline constexpr int kTagCount = 5;
inline constexpr std::array<Tag, kTagCount> kAllTags = {Tag::input, Tag::activation, Tag::kept,
                                                        Tag::workspace, Tag::grad};
std::string_view to_string(Tag tag);

enum class Phase { setup, fwd, bwd };
std::string_view to_string(Phase phase);

// Bytes per tag. [bytes]
struct TagBytes {
  std::array<int64_t, kTagCount> bytes{};
  int64_t& operator[](Tag tag) { return bytes[static_cast<int>(tag)]; }
  int64_t operator[](Tag tag) const { return bytes[static_cast<int>(tag)]; }
  int64_t total() const;
};

// The bookkeeping alone: backends call record_allocation / record_release around their real
// allocations. Not thread-safe: buffers are allocated and freed outside parallel regions.
class MemoryLedger {
 public:
  static constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

  // An allocation that would take the live total above `limit_bytes` fails as out of memory,
  // which lets `--mem-limit` emulate a smaller machine.
  explicit MemoryLedger(int64_t limit_bytes = kUnlimited) : limit_bytes_(limit_bytes) {}

  bool would_exceed_limit(int64_t bytes) const { return live_.total() + bytes > limit_bytes_; }
  void record_allocation(Tag tag, int64_t bytes);
  void record_release(Tag tag, int64_t bytes);

  void set_phase(Phase phase) { phase_ = phase; }
  Phase phase() const { return phase_; }

  // Start a new measurement: high-water marks and peak restart from what is live now.
  void reset_peaks();

  const TagBytes& live() const { return live_; }
  const TagBytes& high_water() const { return high_water_; }  // per tag, each at its own maximum
  int64_t peak_bytes() const { return peak_bytes_; }
  const TagBytes& at_peak() const { return at_peak_; }        // split of the total at its peak
  Phase peak_phase() const { return peak_phase_; }
  int64_t limit_bytes() const { return limit_bytes_; }

 private:
  int64_t limit_bytes_;
  Phase phase_ = Phase::setup;
  TagBytes live_;
  TagBytes high_water_;
  TagBytes at_peak_;
  int64_t peak_bytes_ = 0;
  Phase peak_phase_ = Phase::setup;
};

// Host memory through the ledger: 64-byte aligned (one cache line, one AVX-512 vector).
// Freed blocks are cached by size and handed out again: a benchmark repeats the same sequence of
// allocations every sample, and fresh pages would add page-fault and zeroing time to each one (what a
// framework's caching allocator avoids). The ledger counts only live bytes; the cache is returned to
// the system when the allocator is destroyed.
class HostAllocator {
 public:
  explicit HostAllocator(MemoryLedger& ledger) : ledger_(&ledger) {}
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;
  ~HostAllocator();
  void* allocate(Tag tag, int64_t bytes);  // throws OutOfMemory
  void release(void* pointer, Tag tag, int64_t bytes) noexcept;
  MemoryLedger& ledger() const { return *ledger_; }
  int64_t cached_bytes() const;  // freed but not yet returned to the system [bytes]

 private:
  MemoryLedger* ledger_;
  std::multimap<int64_t, void*> cache_;  // rounded size [bytes] -> free block
};

// An owning, tagged, move-only host array of T.
template <class T>
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostAllocator& allocator, Tag tag, int64_t count)
      : allocator_(&allocator), tag_(tag), count_(count),
        data_(static_cast<T*>(allocator.allocate(tag, count * int64_t(sizeof(T))))) {}
  HostBuffer(HostBuffer&& other) noexcept { swap(other); }
  HostBuffer& operator=(HostBuffer&& other) noexcept {
    HostBuffer(std::move(other)).swap(*this);
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { reset(); }

  void reset() noexcept {
    if (data_) allocator_->release(data_, tag_, count_ * int64_t(sizeof(T)));
    data_ = nullptr;
    count_ = 0;
  }
  T* data() const { return data_; }
  int64_t size() const { return count_; }
  bool empty() const { return data_ == nullptr; }
  Tag tag() const { return tag_; }

 private:
  void swap(HostBuffer& other) noexcept {
    std::swap(allocator_, other.allocator_);
    std::swap(tag_, other.tag_);
    std::swap(count_, other.count_);
    std::swap(data_, other.data_);
  }
  HostAllocator* allocator_ = nullptr;
  Tag tag_ = Tag::workspace;
  int64_t count_ = 0;
  T* data_ = nullptr;
};

}  // namespace flashbench
