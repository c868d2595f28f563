// The operating system's view used as the CPU cross-check: VmHWM resets to the current resident
// set and rises by what a touched buffer adds; MemAvailable is read.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

#include "flashbench/os_memory.hpp"

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

TEST(OsMemory, AvailableMemoryIsRead) {
  const std::optional<int64_t> available = available_memory_bytes();
  ASSERT_TRUE(available);
  EXPECT_GT(*available, 0);
}

}  // namespace
}  // namespace flashbench
