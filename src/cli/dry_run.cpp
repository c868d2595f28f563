#include "cli/dry_run.hpp"

#include <algorithm>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/progress.hpp"
#include "flashbench/errors.hpp"
#include "flashbench/model.hpp"
#include "flashbench/report.hpp"
#include "flashbench/units.hpp"

namespace flashbench::cli {

namespace {

struct PlannedConfiguration {
  Problem problem;
  std::vector<Row> rows;  // Runner::plan's: ok (would run) or skipped with the reason
  double modelled_seconds = 0;  // of the rows that would run, every round [s]
};

std::string planned_peak(const Row& row) { return row.model ? format_bytes(row.model->peak_bytes) : "-"; }

void print_table(std::ostream& out, const DryRun& dry_run, const std::vector<PlannedConfiguration>& plan,
                 size_t implementations, double total_seconds) {
  out << fmt::format("dry run on {}: {} x {}{}; nothing is measured or written\n", dry_run.backend,
                     counted(int64_t(plan.size()), "configuration"), counted(int64_t(implementations), "implementation"),
                     dry_run.already_done > 0 ? fmt::format(" ({} already in --out)", dry_run.already_done) : "");
  size_t name_width = 4;
  for (const PlannedConfiguration& configuration : plan)
    for (const Row& row : configuration.rows) name_width = std::max(name_width, row.implementation().size());
  size_t skipped = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const PlannedConfiguration& configuration = plan[i];
    out << fmt::format("[{}/{}] {}  ~{}\n", i + 1, plan.size(), configuration.problem.describe(),
                       format_eta(configuration.modelled_seconds));
    for (const Row& row : configuration.rows) {
      const bool runs = row.status == Status::ok;
      skipped += !runs;
      out << fmt::format("    {:<{}}  peak {:>10}  {}\n", row.implementation(), name_width, planned_peak(row),
                         runs ? "run" : "skipped: " + row.reason);
    }
  }
  out << fmt::format("{} to run, {} skipped; modelled time {} (FLOP at {}'s nominal {:g} GFLOP/s under the "
                     "stopping rule{}), the machine's own rate decides the rest\n",
                     counted(int64_t(plan.size() * implementations - skipped), "row"),
                     skipped, format_eta(total_seconds), dry_run.backend, dry_run.nominal_flop_rate / 1e9,
                     dry_run.rounds > 1 ? fmt::format(", {} rounds", dry_run.rounds) : "");
}

void print_json(std::ostream& out, const DryRun& dry_run, const std::vector<PlannedConfiguration>& plan,
                double total_seconds) {
  nlohmann::ordered_json configurations = nlohmann::ordered_json::array();
  for (const PlannedConfiguration& configuration : plan) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const Row& row : configuration.rows)
      rows.push_back({{"impl", row.implementation()},
                      {"variant", std::string(to_string(row.variant))},
                      {"status", row.status == Status::ok ? "run" : std::string(to_string(row.status))},
                      {"reason", row.status == Status::ok ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(row.reason)},
                      {"model_peak_bytes", row.model ? nlohmann::ordered_json(row.model->peak_bytes) : nlohmann::ordered_json(nullptr)}});
    configurations.push_back({{"problem", problem_to_json(configuration.problem)},
                              {"modelled_seconds", configuration.modelled_seconds},
                              {"rows", std::move(rows)}});
  }
  const nlohmann::ordered_json document{{"schema_version", kSchemaVersion},
                                        {"dry_run", true},
                                        {"backend", dry_run.backend},
                                        {"nominal_flop_rate", dry_run.nominal_flop_rate},
                                        {"rounds", dry_run.rounds},
                                        {"already_done", dry_run.already_done},
                                        {"modelled_seconds", total_seconds},
                                        {"configurations", std::move(configurations)}};
  out << document.dump(2) << '\n';
}

}  // namespace

int print_dry_run(std::ostream& out, std::string_view format, const DryRun& dry_run, Runner& runner,
                  const std::vector<Problem>& problems, const std::vector<Implementation*>& implementations) {
  if (format != "table" && format != "json")
    throw UsageError(fmt::format("--dry-run prints a table or json (--format table|json), not {}", format));
  std::vector<PlannedConfiguration> plan;
  double total_seconds = 0;
  for (const Problem& problem : problems) {
    PlannedConfiguration& configuration = plan.emplace_back();
    configuration.problem = problem;
    configuration.rows = runner.plan(problem, implementations);
    const auto running = std::count_if(configuration.rows.begin(), configuration.rows.end(),
                                       [](const Row& row) { return row.status == Status::ok; });
    // The same modelled time that deals a sweep to shards, for the rows that would run.
    configuration.modelled_seconds =
        dry_run.rounds * modelled_run_seconds(problem, int(running), dry_run.sampling, dry_run.nominal_flop_rate);
    total_seconds += configuration.modelled_seconds;
  }
  if (format == "json") print_json(out, dry_run, plan, total_seconds);
  else print_table(out, dry_run, plan, implementations.size(), total_seconds);
  return 0;
}

}  // namespace flashbench::cli
