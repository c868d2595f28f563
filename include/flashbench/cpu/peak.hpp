#pragma once
// Measuring the CPU ceilings (peak.hpp holds what is measured).
#include "flashbench/core/peak.hpp"

namespace flashbench {

// Measures both ceilings with `threads` threads (≤ 0: OpenMP's default) on an n×n×n sgemm,
// `sgemm_size` = n, then (with `products`) the attention product shapes on one thread. About a
// second at n = 2048.
PeakReport measure_peak(int threads, int64_t sgemm_size = 2048, bool products = true);

}  // namespace flashbench
