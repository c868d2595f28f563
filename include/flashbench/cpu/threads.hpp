#pragma once
// How many OpenMP threads a CPU run starts.
#include <string_view>

namespace flashbench::cpu {

// `requested` threads (<= 0: OpenMP's default, which OMP_NUM_THREADS sets), held to the hardware
// threads this process may run on: past them a run only waits on itself, and far past them
// (--threads 100000) starting the threads' stacks crashes the process. A count above is clamped
// with a one-line warning on stderr naming where it came from (`flag`, or OMP_NUM_THREADS).
int bounded_thread_count(int requested, std::string_view flag);

}  // namespace flashbench::cpu
