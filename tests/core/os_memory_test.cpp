// The operating system's view used as the CPU cross-check: VmHWM resets to the current resident
// set and rises by what a touched buffer adds; MemAvailable is read.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "flashbench/core/os_memory.hpp"

namespace flashbench {
namespace {

TEST(OsMemory, PeakResetsAndRisesByATouchedBuffer) {
  constexpr int64_t kBytes = int64_t{64} << 20;  // [bytes]
  if (!reset_peak_resident_bytes()) GTEST_SKIP() << "this kernel does not support clear_refs 5";
  const std::optional<int64_t> before = resident_bytes();
  ASSERT_TRUE(before);
  // mmap, not malloc: fresh pages that only become resident when written.
  void* block = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(block, MAP_FAILED);
  std::memset(block, 1, kBytes);
  munmap(block, kBytes);
  const std::optional<int64_t> peak = peak_resident_bytes();
  ASSERT_TRUE(peak);
  // The block, give or take a few pages of the rest of the process coming and going.
  EXPECT_GT(*peak - *before, kBytes - (int64_t{4} << 20));
  EXPECT_LT(*peak - *before, kBytes + (int64_t{16} << 20));

  ASSERT_TRUE(reset_peak_resident_bytes());
  EXPECT_LT(*peak_resident_bytes(), *peak) << "the reset brings VmHWM back to the resident set";
}

// A touched heap block, kept from being optimised away (malloc, memset and free may be elided).
void touch_block(size_t bytes) {
  void* block = std::malloc(bytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, bytes);
  asm volatile("" : : "r"(block) : "memory");
  std::free(block);
}

// glibc, after freeing an 8 MiB mmap'd block, raises its threshold and serves 4 MiB from the heap,
// whose freed pages stay resident: a second 4 MiB block would not raise VmHWM after a reset. With
// fresh pages for large blocks every configuration's OS peak counts its own buffers.
TEST(OsMemory, FreedLargeBlocksAreReturned) {
  constexpr size_t kMiB = size_t{1} << 20;
  use_fresh_pages_for_large_blocks();
  touch_block(8 * kMiB);
  touch_block(4 * kMiB);
  if (!reset_peak_resident_bytes()) GTEST_SKIP() << "this kernel does not support clear_refs 5";
  const int64_t before = *resident_bytes();
  touch_block(4 * kMiB);
  EXPECT_GT(*peak_resident_bytes() - before, int64_t(3 * kMiB));
}

TEST(OsMemory, AvailableMemoryIsRead) {
  const std::optional<int64_t> available = available_memory_bytes();
  ASSERT_TRUE(available);
  EXPECT_GT(*available, 0);
}

}  // namespace
}  // namespace flashbench
