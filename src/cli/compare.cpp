// flashbench compare: two result files row by row, or the variants of one file against `standard`.
#include <unistd.h>

#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/report/compare.hpp"
#include "flashbench/report/reporter.hpp"
#include "flashbench/report/results_file.hpp"

namespace flashbench::cli {

namespace {

struct CompareFlags {
  std::vector<std::string> files;
  std::optional<std::string> baseline;
  CompareOptions options;
  bool fail_on_regression = false;
  bool allow_mismatch = false;
  std::string format = "table";
  bool wide = false;  // --wide: every column of the table
};

// A regression that --fail-on-regression reports: apart from a failure (1) and a usage error (2).
constexpr int kExitRegression = 3;

int run_compare(const CompareFlags& flags) {
  if (flags.format != "table" && flags.format != "json" && flags.format != "md")
    throw UsageError(fmt::format("compare --format: '{}' (expected table, json or md)", flags.format));
  if (!(flags.options.threshold >= 0)) throw UsageError("--threshold must be 0 or more (a fraction, e.g. 0.05)");
  if (!(flags.options.alpha > 0 && flags.options.alpha < 1)) throw UsageError("--alpha must be in (0, 1)");
  Comparison comparison;
  if (flags.baseline) {
    if (flags.files.size() != 1) throw UsageError("compare --baseline VARIANT takes one results file");
    const ResultsFile file = read_results_file(flags.files[0]);
    require_our_schema(file, flags.files[0]);
    comparison = compare_to_baseline(file, *flags.baseline, flags.options);
    comparison.b_name = flags.files[0];
  } else {
    if (flags.files.size() != 2) throw UsageError("compare takes two results files (or --baseline VARIANT and one)");
    const ResultsFile a = read_results_file(flags.files[0]);
    const ResultsFile b = read_results_file(flags.files[1]);
    require_our_schema(a, flags.files[0]);
    require_our_schema(b, flags.files[1]);
    comparison = compare_runs(a, b, flags.options);
    comparison.a_name = flags.files[0];
    comparison.b_name = flags.files[1];
  }
  const std::vector<Difference> differences = comparison.differences();
  if (!differences.empty() && !flags.allow_mismatch) {
    std::string listed;
    for (const Difference& d : differences) listed += fmt::format("{}{}: '{}' vs '{}'", listed.empty() ? "" : "; ", d.what, d.a, d.b);
    throw UsageError(fmt::format("compare: the runs were not made alike ({}); --allow-mismatch compares them anyway", listed));
  }
  if (flags.format == "json") std::cout << comparison.to_json().dump(2) << "\n";
  else if (flags.format == "md") std::cout << comparison.markdown();
  else std::cout << comparison.table(size_t(table_width_for(flags.wide, isatty(STDOUT_FILENO))));
  std::cout.flush();
  return flags.fail_on_regression && comparison.any_slower() ? kExitRegression : 0;
}

}  // namespace

void register_compare(CLI::App& app) {
  auto flags = std::make_shared<CompareFlags>();
  CLI::App* sub = app.add_subcommand("compare", "Compare two result files, or every variant of one file with a baseline");
  // One line a paragraph: --help wraps them to the terminal.
  sub->footer(
      "Rows are matched by backend, variant and problem. Each phase is SLOWER or FASTER when its median moved by "
      "more than --threshold (or the spread of its rounds' medians, if larger) and a two-sided Mann-Whitney U test "
      "gives p < --alpha: over the rounds' medians where both runs have 4 or more (run --rounds R, or runs merged "
      "by merge --rounds), else over the samples (of one round they do not see variation between runs; with 2 or "
      "3 rounds their spread still sets the bar). UNSURE: such a change that the load other processes put on the "
      "slower run's machine beyond the faster one's (meta.environment.other_cpu_load) could explain.\n"
      "Runs whose host, device, threads, dtype or build (type, compiler, flags) differ are refused unless "
      "--allow-mismatch.\n"
      "Exit: 0, 3 with --fail-on-regression and a row SLOWER, 1 a failure, 2 a usage error or a refused mismatch.\n"
      "Examples: flashbench compare before.json after.json --fail-on-regression\n"
      "          flashbench compare --baseline standard run.json --format md");
  sub->add_option("files", flags->files, "Result files (.json or .jsonl): A B, or one with --baseline")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option_function<std::string>("--baseline", [flags](const std::string& v) { flags->baseline = v; },
                                        "Compare every variant of one file with this variant (e.g. standard)");
  sub->add_option("--threshold", flags->options.threshold, "Smallest relative change that counts")->capture_default_str();
  sub->add_option("--alpha", flags->options.alpha, "Significance level of the U test")->capture_default_str();
  sub->add_flag("--fail-on-regression", flags->fail_on_regression, "Exit 3 when any row is SLOWER");
  sub->add_flag("--allow-mismatch", flags->allow_mismatch,
                "Compare runs made on different hosts, devices, thread counts, dtypes or builds (the differences are listed)");
  sub->add_option("--format,-f", flags->format, "table, json or md (Markdown, for a pull request)")->capture_default_str();
  sub->add_flag("--wide", flags->wide,
                "Every column of the table; without it the table keeps to the terminal's width (else COLUMNS, else 100)");
  set_action(sub, [flags](const std::vector<std::string>&) { return run_compare(*flags); });
}

}  // namespace flashbench::cli
