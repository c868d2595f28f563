#pragma once
// The CPU ceilings every CPU result is measured against, taken on this machine in this process:
// the fp32 FMA rate of a register-only loop and the rate of flashbench's own sgemm on a large square
// product, both over `threads` OpenMP threads; OpenBLAS's sgemm beside it when the build found it.
#include <cstdint>
#include <optional>
#include <string>

namespace flashbench {

struct PeakReport {
  int threads = 0;
  std::string simd;                  // "AVX-512" or "AVX2": the FMA width this binary uses
  double fma_gflops = 0;             // median over repetitions [GFLOP/s]
  double fma_gflops_best = 0;        // fastest repetition [GFLOP/s]
  int64_t sgemm_size = 0;            // n of the n×n×n product
  double sgemm_gflops = 0;           // flashbench's cpu::gemm, median [GFLOP/s]
  double sgemm_gflops_best = 0;      // [GFLOP/s]
  std::optional<double> openblas_gflops;  // cblas_sgemm on the same product, median [GFLOP/s]
  std::string openblas_core;         // the kernel family OpenBLAS chose ("SkylakeX", "Prescott", ...)
};

// Measures both ceilings with `threads` threads (≤ 0: OpenMP's default) on an n×n×n sgemm,
// `sgemm_size` = n. Takes about a second at n = 2048 on two cores.
PeakReport measure_peak(int threads, int64_t sgemm_size = 2048);

}  // namespace flashbench
