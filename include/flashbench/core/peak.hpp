#pragma once
// The CPU ceilings every CPU result is measured against, as data (reports read and write them; the
// CPU device measures them: cpu/peak.hpp): the fp32 FMA rate of a register-only loop and the rate of
// flashbench's own sgemm on a large square product, both over `threads` OpenMP threads; OpenBLAS's
// sgemm beside it when the build found it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashbench {

// One matrix product shape the attention kernels run, timed on one thread with flashbench's gemm
// and, when built in, OpenBLAS's sgemm (set to one thread), both on the same operands.
struct ProductRate {
  std::string name;        // which kernel runs it, e.g. "v2 bwd: dV += Pᵀ·dO tile"
  std::string ops;         // "NN", "NT", "TN": op(A), op(B)
  int64_t M = 0, N = 0, K = 0;
  double gflops = 0;                   // flashbench gemm, median [GFLOP/s]
  std::optional<double> openblas_gflops;  // [GFLOP/s]
};

struct PeakReport {
  int threads = 0;
  std::string simd;                  // the ISA the kernels ran on: "avx512", "avx2" or "scalar" (cpu/isa.hpp)
  double fma_gflops = 0;             // median over repetitions [GFLOP/s]
  double fma_gflops_best = 0;        // fastest repetition [GFLOP/s]
  int64_t sgemm_size = 0;            // n of the n×n×n product
  double sgemm_gflops = 0;           // flashbench's cpu::gemm, median [GFLOP/s]
  double sgemm_gflops_best = 0;      // [GFLOP/s]
  std::optional<double> openblas_gflops;  // cblas_sgemm on the same product, median [GFLOP/s]
  std::string openblas_core;         // the kernel family OpenBLAS chose ("SkylakeX", "Prescott", ...)
  std::vector<ProductRate> products;  // the attention kernels' product shapes at N = 2048, d = 64
};

// The sgemm ceiling "% of peak" is read against: the faster of flashbench's gemm and OpenBLAS's
// sgemm (medians), so neither GEMM flatters the percentages — OpenBLAS's only where its kernels use
// no wider vectors than the run's (openblas_left_out): under `--isa avx2` on an AVX-512 machine,
// OpenBLAS's AVX-512 rate is not a ceiling for AVX2 kernels. [GFLOP/s]
double sgemm_ceiling(const PeakReport& peak);
// Whose sgemm that ceiling is: "openblas", or "flashbench" (its own gemm: the faster one, or the only
// one in a build without OpenBLAS or with OpenBLAS left out, where a kernel that beats our gemm
// reads above 100 %).
std::string_view sgemm_ceiling_from(const PeakReport& peak);
// Why OpenBLAS's rate is not in the ceiling although it was measured (its kernel family's vectors
// are wider than the ISA the run's kernels use), or nothing.
std::optional<std::string> openblas_left_out(const PeakReport& peak);

}  // namespace flashbench
