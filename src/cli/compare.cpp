// flashbench compare: two result files row by row, or the variants of one file against `standard`.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "flashbench/compare.hpp"
#include "flashbench/errors.hpp"
#include "flashbench/report.hpp"

namespace flashbench::cli {

namespace {

struct CompareFlags {
  std::vector<std::string> files;
  std::optional<std::string> baseline;
  CompareOptions options;
  bool fail_on_regression = false;
  std::string format = "table";
};

int run_compare(const CompareFlags& flags) {
  if (flags.format != "table" && flags.format != "json")
    throw UsageError(fmt::format("compare --format: '{}' (expected table or json)", flags.format));
  if (!(flags.options.threshold >= 0)) throw UsageError("--threshold must be 0 or more (a fraction, e.g. 0.05)");
  if (!(flags.options.alpha > 0 && flags.options.alpha < 1)) throw UsageError("--alpha must be in (0, 1)");
  Comparison comparison;
  if (flags.baseline) {
    if (flags.files.size() != 1) throw UsageError("compare --baseline VARIANT takes one results file");
    const ResultsFile file = read_results_file(flags.files[0]);
    require_our_schema(file, flags.files[0]);
    comparison = compare_to_baseline(file.rows, *flags.baseline, flags.options);
    comparison.b_name = flags.files[0];
  } else {
    if (flags.files.size() != 2) throw UsageError("compare takes two results files (or --baseline VARIANT and one)");
    const ResultsFile a = read_results_file(flags.files[0]);
    const ResultsFile b = read_results_file(flags.files[1]);
    require_our_schema(a, flags.files[0]);
    require_our_schema(b, flags.files[1]);
    comparison = compare_runs(a.rows, b.rows, flags.options);
    comparison.a_name = flags.files[0];
    comparison.b_name = flags.files[1];
  }
  if (flags.format == "json") {
    nlohmann::ordered_json document = comparison.to_json();
    document["threshold"] = flags.options.threshold;
    document["alpha"] = flags.options.alpha;
    std::cout << document.dump(2) << "\n";
  } else {
    std::cout << comparison.table();
    std::cout << fmt::format("SLOWER/FASTER: medians differ by more than {:.0f}% and the Mann-Whitney U test gives p < {}\n",
                             100 * flags.options.threshold, flags.options.alpha);
  }
  std::cout.flush();
  return flags.fail_on_regression && comparison.any_slower() ? 1 : 0;
}

}  // namespace

void register_compare(CLI::App& app) {
  auto flags = std::make_shared<CompareFlags>();
  CLI::App* sub = app.add_subcommand("compare", "Compare two result files, or every variant of one file with a baseline");
  sub->footer(
      "Rows are matched by backend, variant and problem. Each phase is SLOWER or FASTER when its median moved by\n"
      "more than --threshold and a two-sided Mann-Whitney U test on the samples gives p < --alpha; else SAME.\n"
      "Examples: flashbench compare before.json after.json --fail-on-regression\n"
      "          flashbench compare --baseline standard run.json");
  sub->add_option("files", flags->files, "Result files (.json or .jsonl): A B, or one with --baseline")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option_function<std::string>("--baseline", [flags](const std::string& v) { flags->baseline = v; },
                                        "Compare every variant of one file with this variant (e.g. standard)");
  sub->add_option("--threshold", flags->options.threshold, "Smallest relative change that counts")->capture_default_str();
  sub->add_option("--alpha", flags->options.alpha, "Significance level of the U test")->capture_default_str();
  sub->add_flag("--fail-on-regression", flags->fail_on_regression, "Exit 1 when any row is SLOWER");
  sub->add_option("--format,-f", flags->format, "table or json")->capture_default_str();
  set_action(sub, [flags](const std::vector<std::string>&) { return run_compare(*flags); });
}

}  // namespace flashbench::cli
