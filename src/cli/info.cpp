// flashbench info: what this binary is and what it runs on.
#include <algorithm>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/peak.hpp"
#include "flashbench/harness/plugins.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/report/config.hpp"
#include "flashbench/report/json.hpp"

namespace flashbench::cli {

namespace {

struct InfoOptions {
  std::string format = "table";
  bool peak = false;        // measure the fp32 FMA and sgemm ceilings (about a second)
  int threads = 0;          // for --peak; 0: all
  int64_t peak_size = 2048; // n of the n×n×n sgemm
  std::vector<std::string> plugins;  // --plugin: libraries to load and describe
};

int run_info(const InfoOptions& options, const std::vector<std::string>& argv) {
  const std::vector<PluginDescription> plugins = load_plugins(options.plugins);
  nlohmann::ordered_json info = make_meta(argv);
  // What each plugin offers (its implementations also appear under their devices below).
  for (const PluginDescription& plugin : plugins) {
    nlohmann::ordered_json described{{"path", plugin.path}, {"name", plugin.name}, {"abi_version", plugin.abi_version},
                                     {"implementations", nlohmann::ordered_json::array()}};
    for (const PluginOffer& offer : plugin.implementations)
      described["implementations"].push_back({{"name", offer.name},
                                              {"device", offer.device},
                                              {"variant", to_string(offer.variant)},
                                              {"summary", offer.summary}});
    info["plugins"].push_back(described);
  }
  // Every device of this build, opened where it is present (it adds its block, e.g. "gpu"), with
  // its implementations.
  for (const DeviceEntry& entry : registry().devices()) {
    nlohmann::ordered_json device{{"name", entry.name}, {"summary", entry.summary}};
    try {
      entry.open(DeviceOptions{})->describe(info);
      device["available"] = true;
    } catch (const UsageError& e) {
      device["available"] = false;
      device["why"] = e.what();
    }
    for (const auto& implementation : entry.implementations())
      device["implementations"].push_back({{"name", implementation->name()},
                                           {"variant", to_string(implementation->variant())},
                                           {"summary", implementation->summary()}});
    info["devices"].push_back(device);
  }
  if (options.threads < 0) throw UsageError(fmt::format("--threads must be at least 1 (got {})", options.threads));
  if (options.peak)
    info["peak"] = peak_to_json(registry().device_with_peak().measure_peak(options.threads, options.peak_size, true));
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
  if (info.contains("cpu_isa")) {  // the CPU device's block (cpu/device.cpp)
    const auto& isa = info["cpu_isa"];
    fmt::print("ISA          CPU kernels on {} ({} lanes; this CPU runs {}; built for {}; --isa chooses)\n",
               isa["active"].get<std::string>(), isa["lanes"].get<int>(),
               fmt::join(isa["supported"].get<std::vector<std::string>>(), ", "),
               fmt::join(isa["compiled"].get<std::vector<std::string>>(), ", "));
  }
  fmt::print("CUDA         {}\n", build["cuda"].get<bool>() ? "built in" : "not built in");
  fmt::print("CPU          {}\n", host["cpu"].get<std::string>());
  fmt::print("cores        {}\n", host["cores"].get<int>());
  fmt::print("OpenMP       {} threads\n", host["omp_threads"].get<int>());
  if (info.contains("gpu")) {
    const auto& gpu = info["gpu"];
    fmt::print("GPU          {} (sm {}, {:.1f} GiB, {} SMs), driver {}, runtime {}\n", gpu.value("name", "?"),
               gpu.value("compute_capability", "?"), gpu.value("memory_bytes", 0.0) / (1 << 30),
               gpu.value("multiprocessors", 0), gpu.value("driver_version", "?"), gpu.value("runtime_version", "?"));
  } else {
    fmt::print("GPU          none\n");
  }
  // One column for every --impl name, built-in and plugin, as wide as the longest (at least 12).
  size_t name_width = 12;
  for (const auto& device : info["devices"])
    for (const auto& implementation : device.value("implementations", nlohmann::ordered_json::array()))
      name_width = std::max(name_width, implementation["name"].get<std::string>().size());
  for (const auto& plugin : info.value("plugins", nlohmann::ordered_json::array()))
    for (const auto& offer : plugin["implementations"])
      name_width = std::max(name_width, offer["name"].get<std::string>().size());
  for (const auto& device : info["devices"]) {
    fmt::print("backend      {}: {}{}\n", device["name"].get<std::string>(), device["summary"].get<std::string>(),
               device["available"].get<bool>() ? "" : " (not available here: " + device["why"].get<std::string>() + ")");
    for (const auto& implementation : device.value("implementations", nlohmann::ordered_json::array()))
      fmt::print("  --impl {:<{}} {}\n", implementation["name"].get<std::string>(), name_width,
                 implementation["summary"].get<std::string>());
  }
  for (const auto& plugin : info.value("plugins", nlohmann::ordered_json::array())) {
    fmt::print("plugin       {} ({}, ABI {})\n", plugin["name"].get<std::string>(), plugin["path"].get<std::string>(),
               plugin["abi_version"].get<unsigned>());
    for (const auto& offer : plugin["implementations"])
      fmt::print("  --impl {:<{}} {}, keeps what {} keeps: {}\n", offer["name"].get<std::string>(), name_width,
                 offer["device"].get<std::string>(), offer["variant"].get<std::string>(),
                 offer["summary"].get<std::string>());
  }
  if (info.contains("peak")) {
    const auto& peak = info["peak"];
    fmt::print("FMA peak     {:.0f} GFLOP/s fp32 ({} threads, {}; fastest repetition {:.0f})\n",
               peak["fma_gflops"].get<double>(), peak["threads"].get<int>(), peak["simd"].get<std::string>(),
               peak["fma_gflops_best"].get<double>());
    fmt::print("sgemm peak   {:.0f} GFLOP/s flashbench gemm, {}^3 (fastest {:.0f})\n", peak["sgemm_gflops"].get<double>(),
               peak["sgemm_size"].get<int64_t>(), peak["sgemm_gflops_best"].get<double>());
    if (!peak["openblas_sgemm_gflops"].is_null())
      fmt::print("OpenBLAS     {:.0f} GFLOP/s sgemm, same product (kernel {})\n",
                 peak["openblas_sgemm_gflops"].get<double>(), peak["openblas_core"].get<std::string>());
    const double ceiling = peak["sgemm_ceiling_gflops"].get<double>();
    if (peak["openblas_sgemm_gflops"].is_null())
      fmt::print("ceiling      {:.0f} GFLOP/s sgemm: flashbench's own gemm, as this build has no OpenBLAS (install "
                 "libopenblas-dev and rebuild for an independent one); rates above it read over 100 %\n",
                 ceiling);
    else if (peak.contains("openblas_left_out"))
      fmt::print("ceiling      {:.0f} GFLOP/s sgemm: flashbench's gemm, as {} (run --peak reads rates against it)\n",
                 ceiling, peak["openblas_left_out"].get<std::string>());
    else
      fmt::print("ceiling      {:.0f} GFLOP/s sgemm: {}, the faster of the two (run --peak reads rates against it)\n",
                 ceiling, peak["sgemm_ceiling_from"].get<std::string>() == "openblas" ? "OpenBLAS's" : "flashbench's gemm");
    fmt::print("attention products, 1 thread [GFLOP/s]: flashbench gemm vs OpenBLAS\n");
    for (const auto& p : peak["products"]) {
      const bool blas = !p["openblas_gflops_1thread"].is_null();
      fmt::print("  {:<36} {} {:>4}x{:<4}x{:>4}  {:6.1f}  {}\n", p["name"].get<std::string>(), p["ops"].get<std::string>(),
                 p["M"].get<int64_t>(), p["N"].get<int64_t>(), p["K"].get<int64_t>(), p["gflops_1thread"].get<double>(),
                 blas ? fmt::format("{:6.1f}  ({:.2f}x)", p["openblas_gflops_1thread"].get<double>(),
                                    p["gflops_1thread"].get<double>() / p["openblas_gflops_1thread"].get<double>())
                      : std::string("-"));
    }
  }
  return 0;
}

}  // namespace

void register_info(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* sub = app.add_subcommand("info", "Version, build, CPU, threads, SIMD level, CUDA support, backends and their implementations");
  sub->add_option("--format", options->format, "table or json")->capture_default_str();
  sub->add_flag("--peak", options->peak, "Measure this machine's fp32 FMA and sgemm peak [GFLOP/s]");
  sub->add_option("--threads", options->threads, "Threads for --peak (default: all; at most the hardware threads)");
  add_isa_option(sub);
  sub->add_option("--peak-size", options->peak_size, "n of the n^3 sgemm for --peak")->capture_default_str();
  sub->add_option("--plugin", options->plugins,
                  "Load a plugin (docs/plugins.md) and list what it offers; repeatable (FLASHBENCH_PLUGINS adds more)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  set_action(sub, [options](const std::vector<std::string>& argv) { return run_info(*options, argv); });
}

}  // namespace flashbench::cli
