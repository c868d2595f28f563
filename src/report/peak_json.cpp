#include <algorithm>

#include <fmt/format.h>

#include "flashbench/peak.hpp"
#include "flashbench/report.hpp"
#include "flashbench/units.hpp"

namespace flashbench {

using nlohmann::ordered_json;

namespace {
std::optional<double> number(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number()) return std::nullopt;
  return object.at(key).get<double>();
}
}  // namespace

ordered_json peak_to_json(const PeakReport& peak) {
  ordered_json j;
  j["sgemm_ceiling_gflops"] = sgemm_ceiling(peak);
  j["sgemm_ceiling_from"] = sgemm_ceiling_from(peak);
  if (const std::optional<std::string> why = openblas_left_out(peak)) j["openblas_left_out"] = *why;
  j["threads"] = peak.threads;
  j["simd"] = peak.simd;
  j["fma_gflops"] = peak.fma_gflops;
  j["fma_gflops_best"] = peak.fma_gflops_best;
  j["sgemm_size"] = peak.sgemm_size;
  j["sgemm_gflops"] = peak.sgemm_gflops;
  j["sgemm_gflops_best"] = peak.sgemm_gflops_best;
  j["openblas_sgemm_gflops"] = json_or_null(peak.openblas_gflops);
  j["openblas_core"] = peak.openblas_core;
  j["products"] = ordered_json::array();
  for (const ProductRate& product : peak.products) {
    ordered_json p;
    p["name"] = product.name;
    p["ops"] = product.ops;
    p["M"] = product.M;
    p["N"] = product.N;
    p["K"] = product.K;
    p["gflops_1thread"] = product.gflops;
    p["openblas_gflops_1thread"] = json_or_null(product.openblas_gflops);
    j["products"].push_back(p);
  }
  return j;
}

std::optional<PeakReport> peak_from_json(const nlohmann::json& j) {
  const std::optional<double> threads = number(j, "threads"), fma = number(j, "fma_gflops"),
                              sgemm = number(j, "sgemm_gflops");
  if (!threads || !fma || !sgemm || *sgemm <= 0) return std::nullopt;
  PeakReport peak;
  peak.threads = int(*threads);
  // Files written before the kernels came in several ISAs name the width as "AVX-512" or "AVX2".
  peak.simd = j.contains("simd") && j.at("simd").is_string() ? j.at("simd").get<std::string>() : std::string();
  if (peak.simd == "AVX-512") peak.simd = "avx512";
  if (peak.simd == "AVX2") peak.simd = "avx2";
  peak.fma_gflops = *fma;
  peak.fma_gflops_best = number(j, "fma_gflops_best").value_or(*fma);
  peak.sgemm_size = int64_t(number(j, "sgemm_size").value_or(0));
  peak.sgemm_gflops = *sgemm;
  peak.sgemm_gflops_best = number(j, "sgemm_gflops_best").value_or(*sgemm);
  peak.openblas_gflops = number(j, "openblas_sgemm_gflops");
  peak.openblas_core = j.value("openblas_core", std::string());
  if (j.contains("products") && j.at("products").is_array())
    for (const nlohmann::json& p : j.at("products")) {
      ProductRate product;
      product.name = p.value("name", std::string());
      product.ops = p.value("ops", std::string());
      product.M = int64_t(number(p, "M").value_or(0));
      product.N = int64_t(number(p, "N").value_or(0));
      product.K = int64_t(number(p, "K").value_or(0));
      product.gflops = number(p, "gflops_1thread").value_or(0);
      product.openblas_gflops = number(p, "openblas_gflops_1thread");
      peak.products.push_back(product);
    }
  return peak;
}

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
