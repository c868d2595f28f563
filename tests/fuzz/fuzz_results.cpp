// libFuzzer target: a results file as `compare` reads it (.json and .jsonl), then what `compare`
// does with its rows: each against itself, every variant against `standard`, the table and JSON.
// Anything but a UsageError or RuntimeFailure naming what was wrong is a defect.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flashbench/core/errors.hpp"
#include "flashbench/report/compare.hpp"
#include "flashbench/report/results_file.hpp"

namespace {
void compare_with_itself(const flashbench::ResultsFile& file) {
  const flashbench::CompareOptions options;
  const flashbench::Comparison runs = flashbench::compare_runs(file.rows, file.rows, options);
  (void)runs.table();
  (void)runs.to_json().dump();
  const flashbench::Comparison baseline = flashbench::compare_to_baseline(file.rows, "standard", options);
  (void)baseline.table();
  (void)baseline.to_json().dump();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool lines : {false, true}) {
    try {
      const std::string_view path = lines ? "fuzz.jsonl" : "fuzz.json";
      const flashbench::ResultsFile file = flashbench::parse_results(text, lines, path);
      flashbench::require_our_schema(file, path);
      compare_with_itself(file);
    } catch (const flashbench::UsageError&) {
    } catch (const flashbench::RuntimeFailure&) {
    }
  }
  return 0;
}
