// flashbench info: what this binary is and what it runs on.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "flashbench/errors.hpp"
#include "flashbench/report.hpp"

namespace flashbench::cli {

namespace {

// The widest SIMD instruction set this binary was compiled for.
std::string_view compiled_simd() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__SSE2__)
  return "SSE2";
#else
  return "none";
#endif
}

// The widest one this CPU offers.
std::string_view cpu_simd() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return "AVX2";
  return "SSE2";
#else
  return "unknown";
#endif
}

struct InfoOptions {
  std::string format = "table";
};

int run_info(const InfoOptions& options, const std::vector<std::string>& argv) {
  nlohmann::ordered_json info = make_meta(argv);
  info["host"]["simd_cpu"] = cpu_simd();
  info["build"]["simd"] = compiled_simd();
  if (options.format == "json") {
    std::cout << info.dump(2) << "\n";
    return 0;
  }
  if (options.format != "table") throw UsageError(fmt::format("unknown format '{}' (expected table or json)", options.format));
  const auto& build = info["build"];
  const auto& host = info["host"];
  fmt::print("flashbench   {} (git {})\n", info["version"].get<std::string>(), info["git"].get<std::string>());
  fmt::print("build        {}, {}, flags '{}'\n", build["type"].get<std::string>(), build["compiler"].get<std::string>(),
             build["flags"].get<std::string>());
  fmt::print("SIMD         compiled for {}, CPU offers {}\n", build["simd"].get<std::string>(),
             host["simd_cpu"].get<std::string>());
  fmt::print("CUDA         {}\n", build["cuda"].get<bool>() ? "built in" : "not built in");
  fmt::print("CPU          {}\n", host["cpu"].get<std::string>());
  fmt::print("cores        {}\n", host["cores"].get<int>());
  fmt::print("OpenMP       {} threads\n", host["omp_threads"].get<int>());
  if (info.contains("gpu")) fmt::print("GPU          {}\n", info["gpu"].dump());
  return 0;
}

}  // namespace

void register_info(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* sub = app.add_subcommand("info", "Version, build, CPU, threads, SIMD level and CUDA support");
  sub->add_option("--format", options->format, "table or json")->capture_default_str();
  set_action(sub, [options](const std::vector<std::string>& argv) { return run_info(*options, argv); });
}

}  // namespace flashbench::cli
