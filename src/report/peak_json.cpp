// The CPU ceilings in the JSON contract (report/json.hpp); their arithmetic is core (core/peak.cpp).
#include <optional>
#include <string>

#include "flashbench/core/peak.hpp"
#include "flashbench/report/json.hpp"

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

}  // namespace flashbench
