#pragma once
// The operating system's view of this process's memory (Linux /proc), the cross-check of the
// tracked ledger on CPU. The OS peak counts every resident page: the tracked buffers that were
// touched, plus the program, its libraries, thread stacks and allocator slack, so it sits above
// the tracked peak by a baseline; untouched parts of large buffers are not resident at all.
#include <cstdint>
#include <optional>

namespace flashbench {

// Resets the peak resident set size (VmHWM) to the current one: `echo 5 > /proc/self/clear_refs`.
// False where the kernel does not support it.
bool reset_peak_resident_bytes();

// VmHWM from /proc/self/status: the peak resident set size since start or the last reset. [bytes]
std::optional<int64_t> peak_resident_bytes();

// VmRSS from /proc/self/status: the resident set size now. [bytes]
std::optional<int64_t> resident_bytes();

// Makes the C allocator serve every block of at least `threshold_bytes` with its own mmap and
// unmap it on free. glibc otherwise raises its mmap threshold (up to 32 MiB) after the first large
// free and serves later blocks from its heap, whose freed pages stay resident: a configuration
// that reuses them never raises VmHWM, and its OS peak reads 0 or less. Call once before measuring.
void use_fresh_pages_for_large_blocks(int64_t threshold_bytes = int64_t{128} << 10);

// MemAvailable from /proc/meminfo: what can be allocated without swapping. [bytes]
std::optional<int64_t> available_memory_bytes();

}  // namespace flashbench
