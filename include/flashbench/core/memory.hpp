#pragma once
// Tagged memory accounting. Every buffer a benchmark run allocates, on any backend, is recorded in
// a MemoryLedger under one of five tags, so the live bytes per tag, their high-water marks and the
// overall peak (with the tag split at that moment) are known exactly.
#include <array>
#include <cstdint>
#include <limits>
#include <cstddef>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

namespace flashbench {

class MemoryTimeline;  // timeline.hpp

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

// The bookkeeping alone: memory spaces call record_allocation / record_release around their real
// allocations. Not thread-safe: buffers are allocated and freed outside parallel regions.
class MemoryLedger {
 public:
  static constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

  // An allocation that would take the live total above `limit_bytes` fails as out of memory,
  // which lets `--mem-limit` emulate a smaller machine.
  explicit MemoryLedger(int64_t limit_bytes = kUnlimited) : limit_bytes_(limit_bytes) {}

  bool would_exceed_limit(int64_t bytes) const { return live_.total() + bytes > limit_bytes_; }
  // `address` names the buffer, so that a timeline can pair each release with its allocation.
  void record_allocation(Tag tag, int64_t bytes, const void* address = nullptr);
  void record_release(Tag tag, int64_t bytes, const void* address = nullptr);

  void set_phase(Phase phase) { phase_ = phase; }
  Phase phase() const { return phase_; }

  // From now on every allocation and release is also appended to `timeline` (nullptr: no longer).
  // The ledger does not own it.
  void attach(MemoryTimeline* timeline) { timeline_ = timeline; }
  MemoryTimeline* timeline() const { return timeline_; }

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
  MemoryTimeline* timeline_ = nullptr;
};

// Where buffers live: the host heap or a device's pool. Every allocation and release passes through
// the ledger; a space also reports its operating system's (or driver's) view of the peak, the
// cross-check of the ledger's own.
class MemorySpace {
 public:
  explicit MemorySpace(MemoryLedger& ledger) : ledger_(&ledger) {}
  MemorySpace(const MemorySpace&) = delete;
  MemorySpace& operator=(const MemorySpace&) = delete;
  virtual ~MemorySpace() = default;

  virtual void* allocate(Tag tag, int64_t bytes) = 0;  // throws OutOfMemory
  virtual void release(void* pointer, Tag tag, int64_t bytes) noexcept = 0;

  // The outside view of the peak: restart watching it now; what it saw since (CPU: how far the
  // resident set's high-water mark rose; CUDA: the pool's own high-water mark, which covers this
  // space alone). nullopt where the system cannot tell. [bytes]
  virtual void reset_os_peak() {}
  virtual std::optional<int64_t> os_peak_bytes() const { return std::nullopt; }

  MemoryLedger& ledger() const { return *ledger_; }

 protected:
  // Throws OutOfMemory when `bytes` more would pass the ledger's limit; negative sizes are a bug.
  void check_limit(Tag tag, int64_t bytes) const;

 private:
  MemoryLedger* ledger_;
};

// Host memory through the ledger: 64-byte aligned (one cache line, one AVX-512 vector).
// Freed blocks are cached by size and handed out again: a benchmark repeats the same sequence of
// allocations every sample, and fresh pages would add page-fault and zeroing time to each one (what a
// framework's caching allocator avoids). The ledger counts only live bytes; the cache is returned to
// the system when the space is destroyed. Its outside view is the resident set's high-water mark.
class HostSpace final : public MemorySpace {
 public:
  explicit HostSpace(MemoryLedger& ledger) : MemorySpace(ledger) {}
  ~HostSpace() override;
  void* allocate(Tag tag, int64_t bytes) override;
  void release(void* pointer, Tag tag, int64_t bytes) noexcept override;
  void reset_os_peak() override;
  std::optional<int64_t> os_peak_bytes() const override;
  int64_t cached_bytes() const;  // freed but not yet returned to the system [bytes]

 private:
  std::multimap<int64_t, void*> cache_;  // rounded size [bytes] -> free block
  std::optional<int64_t> resident_before_;  // VmRSS when the watch started, if VmHWM could be reset
};

// An owning, tagged, move-only array of `count` T in a memory space (host or device).
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemorySpace& space, Tag tag, int64_t count)
      : space_(&space), tag_(tag), count_(count),
        data_(static_cast<T*>(space.allocate(tag, count * int64_t(sizeof(T))))) {}
  Buffer(Buffer&& other) noexcept { swap(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    Buffer(std::move(other)).swap(*this);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset() noexcept {
    if (data_) space_->release(data_, tag_, count_ * int64_t(sizeof(T)));
    data_ = nullptr;
    count_ = 0;
  }
  T* data() const { return data_; }
  template <class U>
  U* as() const { return reinterpret_cast<U*>(data_); }  // the same bytes seen as U (raw buffers)
  int64_t size() const { return count_; }
  int64_t bytes() const { return count_ * int64_t(sizeof(T)); }
  bool empty() const { return data_ == nullptr; }
  Tag tag() const { return tag_; }

 private:
  void swap(Buffer& other) noexcept {
    std::swap(space_, other.space_);
    std::swap(tag_, other.tag_);
    std::swap(count_, other.count_);
    std::swap(data_, other.data_);
  }
  MemorySpace* space_ = nullptr;
  Tag tag_ = Tag::workspace;
  int64_t count_ = 0;
  T* data_ = nullptr;
};

// Bytes in a device's storage format, untyped (a tensor whose element type is the problem's dtype).
using RawBuffer = Buffer<std::byte>;

}  // namespace flashbench
