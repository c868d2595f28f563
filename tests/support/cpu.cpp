#include "support/cpu.hpp"

#include <omp.h>

namespace flashbench::testing {

RunOptions one_sample_options() {
  RunOptions options;
  options.sampling.warmup = 0;
  options.sampling.warmup_ms = 0;
  options.sampling.min_samples = 1;
  options.sampling.max_samples = 1;
  return options;
}

std::vector<Row> run_cpu(const Problem& problem, std::span<const Variant> variants, const RunOptions& options,
                         int threads) {
  const int threads_before = omp_get_max_threads();
  const DeviceEntry& entry = registry().device("cpu");
  std::vector<std::string> names;
  for (Variant variant : variants) names.emplace_back(to_string(variant));
  std::vector<std::unique_ptr<Implementation>> implementations = select_implementations(entry, names);
  std::vector<Implementation*> chosen;
  for (const auto& implementation : implementations) chosen.push_back(implementation.get());
  std::unique_ptr<Device> device = entry.open(DeviceOptions{.threads = threads});
  std::vector<Row> rows = Runner(*device, options).run(problem, chosen);
  omp_set_num_threads(threads_before);
  return rows;
}

ModelSource cpu_model(int threads) { return model_source(registry().device("cpu"), DeviceOptions{.threads = threads}); }

}  // namespace flashbench::testing
