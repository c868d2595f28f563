// The ceilings' arithmetic (core/peak.hpp): which sgemm rate a CPU result is read against.
#include <algorithm>

#include <fmt/format.h>

#include "flashbench/core/peak.hpp"
#include "flashbench/core/units.hpp"

namespace flashbench {

namespace {

// How wide an ISA's vectors are, in the order flashbench names them: scalar < avx2 < avx512; -1
// for a name it does not know.
int isa_rank(std::string_view isa) {
  if (isa == "scalar") return 0;
  if (isa == "avx2") return 1;
  if (isa == "avx512") return 2;
  return -1;
}

// The ISA of an OpenBLAS kernel family (openblas_get_corename(), any case): "avx512" for the
// families built on AVX-512, "avx2" for those on AVX2 with FMA, "" for older or unknown ones.
std::string_view openblas_core_isa(std::string_view core) {
  const std::string lower = lowercase(core);
  for (std::string_view family : {"skylakex", "cooperlake", "sapphirerapids"})
    if (lower == family) return "avx512";
  for (std::string_view family : {"haswell", "zen", "skylake"})  // OpenBLAS's "Zen" runs Haswell's kernels
    if (lower == family) return "avx2";
  return "";
}

// OpenBLAS's rate, where it may stand as a ceiling for the run's kernels.
std::optional<double> comparable_openblas(const PeakReport& peak) {
  return openblas_left_out(peak) ? std::nullopt : peak.openblas_gflops;
}

}  // namespace

std::optional<std::string> openblas_left_out(const PeakReport& peak) {
  if (!peak.openblas_gflops) return std::nullopt;
  const std::string_view blas_isa = openblas_core_isa(peak.openblas_core);
  const int blas_rank = isa_rank(blas_isa), kernel_rank = isa_rank(peak.simd);
  if (blas_rank < 0 || kernel_rank < 0 || blas_rank <= kernel_rank) return std::nullopt;
  return fmt::format("OpenBLAS's {} kernels use {}, wider than the run's {} kernels", peak.openblas_core, blas_isa,
                     peak.simd);
}

double sgemm_ceiling(const PeakReport& peak) { return std::max(peak.sgemm_gflops, comparable_openblas(peak).value_or(0.0)); }

std::string_view sgemm_ceiling_from(const PeakReport& peak) {
  return comparable_openblas(peak).value_or(0.0) > peak.sgemm_gflops ? "openblas" : "flashbench";
}

}  // namespace flashbench
