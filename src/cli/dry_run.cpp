#include "dry_run.hpp"

#include <algorithm>
#include <chrono>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "help_format.hpp"
#include "progress.hpp"
#include "run_estimate.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/model/model.hpp"
#include "flashbench/report/json.hpp"

namespace flashbench::cli {

namespace {

struct PlannedConfiguration {
  Problem problem;
  std::vector<Row> rows;  // Runner::plan's: ok (would run) or skipped with the reason
  double modelled_seconds = 0;   // of the rows that would run, every round, at the nominal rate [s]
  double estimated_seconds = 0;  // the same from what the probe measured [s]
};

// What the probe ran and learned.
struct Probe {
  std::optional<Problem> problem;  // empty: nothing would run
  double seconds = 0;              // its wall time [s]
  std::string failed;              // why it taught nothing, where it did not
};

// One pass of the probe costs at most this at the backend's nominal rate [s], and its samples at
// most kProbeMaxTime a row: long enough for the stopping rule to show how noisy the machine is.
constexpr double kProbePassSeconds = 0.02;
constexpr double kProbeMaxTime = 1.0;

// The largest configuration that would run, its N (and N_k) halved until a pass fits
// kProbePassSeconds at the nominal rate; below N = 32, its batch and then its layers.
std::optional<Problem> probe_problem(const std::vector<PlannedConfiguration>& plan, double nominal_flop_rate) {
  const PlannedConfiguration* largest = nullptr;
  const auto work = [](const Problem& p) { return p.forward_flop() + p.backward_flop(); };
  for (const PlannedConfiguration& configuration : plan) {
    const bool runs = std::any_of(configuration.rows.begin(), configuration.rows.end(),
                                  [](const Row& row) { return row.status == Status::ok; });
    if (runs && (!largest || work(configuration.problem) > work(largest->problem))) largest = &configuration;
  }
  if (!largest) return std::nullopt;
  Problem probe = largest->problem;
  while (work(probe) > kProbePassSeconds * nominal_flop_rate) {
    if (probe.seq >= 32 && probe.key_seq() >= 32) {
      probe.seq /= 2;
      if (probe.seq_kv > 0) probe.seq_kv /= 2;
    } else if (probe.batch > 1) {
      probe.batch /= 2;
    } else if (probe.layers > 1) {
      probe.layers /= 2;
    } else {
      break;
    }
  }
  return probe;
}

// `text` as lines of the help's width, those after the first indented by `indent` spaces more than
// its own (which begins with its indentation).
void print_wrapped(std::ostream& out, const std::string& text, size_t indent) {
  const size_t own = text.find_first_not_of(' ');
  const std::string continuation(own + indent, ' ');
  bool first = true;
  for (const std::string& line : wrap_words(text.substr(own), help_width() - own - indent)) {
    out << (first ? std::string(own, ' ') : continuation) << line << '\n';
    first = false;
  }
}

std::string planned_peak(const Row& row) { return row.model ? format_bytes(row.model->peak_bytes) : "-"; }

void print_table(std::ostream& out, const DryRun& dry_run, const std::vector<PlannedConfiguration>& plan,
                 size_t implementations, const Probe& probe, const RunEstimate& estimate, double estimated_seconds,
                 double modelled_seconds) {
  out << fmt::format("dry run on {}: {} x {}{}; nothing is written\n", dry_run.backend,
                     counted(int64_t(plan.size()), "configuration"), counted(int64_t(implementations), "implementation"),
                     dry_run.already_done > 0 ? fmt::format(" ({} already in --out)", dry_run.already_done) : "");
  size_t name_width = 4;
  for (const PlannedConfiguration& configuration : plan)
    for (const Row& row : configuration.rows) name_width = std::max(name_width, row.implementation().size());
  size_t skipped = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const PlannedConfiguration& configuration = plan[i];
    out << fmt::format("[{}/{}] {}  ~{}\n", i + 1, plan.size(), configuration.problem.describe(),
                       format_eta(configuration.estimated_seconds));
    for (const Row& row : configuration.rows) {
      const bool runs = row.status == Status::ok;
      skipped += !runs;
      out << fmt::format("    {:<{}}  peak {:>10}  {}\n", row.implementation(), name_width, planned_peak(row),
                         runs ? "run" : "skipped: " + row.reason);
    }
  }
  out << fmt::format("{} to run, {} skipped; estimated time {}{}\n",
                     counted(int64_t(plan.size() * implementations - skipped), "row"), skipped,
                     format_eta(estimated_seconds),
                     dry_run.rounds > 1 ? fmt::format(" ({} rounds)", dry_run.rounds) : "");
  if (probe.problem && probe.failed.empty())
    print_wrapped(out, fmt::format("  learned in {:.1f} s from a probe of {}: {}", probe.seconds,
                                   probe.problem->describe(), estimate.describe()), 2);
  else if (probe.problem)
    print_wrapped(out, fmt::format("  the probe taught nothing ({}): the time is the nominal rate's", probe.failed), 2);
  print_wrapped(out, fmt::format("  modelled time {} (FLOP at {}'s nominal {:g} GFLOP/s, --max-time spent by every "
                                 "row): what deals a sweep to --shard",
                                 format_eta(modelled_seconds), dry_run.backend, dry_run.nominal_flop_rate / 1e9), 2);
}

void print_json(std::ostream& out, const DryRun& dry_run, const std::vector<PlannedConfiguration>& plan,
                const Probe& probe, const RunEstimate& estimate, double estimated_seconds, double modelled_seconds) {
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
                              {"estimated_seconds", configuration.estimated_seconds},
                              {"modelled_seconds", configuration.modelled_seconds},
                              {"rows", std::move(rows)}});
  }
  nlohmann::ordered_json probe_json = nullptr;
  if (probe.problem)
    probe_json = {{"problem", problem_to_json(*probe.problem)},
                  {"seconds", probe.seconds},
                  {"learned", probe.failed.empty() ? nlohmann::ordered_json(estimate.describe()) : nlohmann::ordered_json(nullptr)},
                  {"failed", probe.failed.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(probe.failed)}};
  const nlohmann::ordered_json document{{"schema_version", kSchemaVersion},
                                        {"dry_run", true},
                                        {"backend", dry_run.backend},
                                        {"nominal_flop_rate", dry_run.nominal_flop_rate},
                                        {"rounds", dry_run.rounds},
                                        {"already_done", dry_run.already_done},
                                        {"estimated_seconds", estimated_seconds},
                                        {"modelled_seconds", modelled_seconds},
                                        {"probe", std::move(probe_json)},
                                        {"configurations", std::move(configurations)}};
  out << document.dump(2) << '\n';
}

// Runs the probe with the run's options (--max-time at most kProbeMaxTime) and teaches `estimate`
// what its rows measured.
Probe run_probe(Device& device, const DryRun& dry_run, const std::vector<PlannedConfiguration>& plan,
                const std::vector<Implementation*>& implementations, RunEstimate& estimate) {
  Probe probe;
  probe.problem = probe_problem(plan, dry_run.nominal_flop_rate);
  if (!probe.problem) return probe;
  RunOptions options = dry_run.options;
  options.sampling.max_time_s = std::min(options.sampling.max_time_s, kProbeMaxTime);
  options.record_timeline = false;
  options.deadline = options.hard_deadline = std::nullopt;
  Runner runner(device, options);
  const auto began = std::chrono::steady_clock::now();
  const double reference_flop = runner.reference_flop(*probe.problem);
  try {
    for (const Row& row : runner.run(*probe.problem, implementations)) estimate.learn(row, reference_flop);
  } catch (const RuntimeFailure& e) {
    probe.failed = e.what();
  } catch (const OutOfMemory& e) {
    probe.failed = e.what();
  }
  probe.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (probe.failed.empty() && !estimate.learned()) probe.failed = "none of its rows ran to the stopping rule";
  return probe;
}

}  // namespace

int print_dry_run(std::ostream& out, std::string_view format, const DryRun& dry_run, Device& device,
                  const std::vector<Problem>& problems, const std::vector<Implementation*>& implementations) {
  if (format != "table" && format != "json")
    throw UsageError(fmt::format("--dry-run prints a table or json (--format table|json), not {}", format));
  Runner planner(device, dry_run.options);
  std::vector<PlannedConfiguration> plan;
  for (const Problem& problem : problems) {
    PlannedConfiguration& configuration = plan.emplace_back();
    configuration.problem = problem;
    configuration.rows = planner.plan(problem, implementations);
  }
  RunEstimate estimate(dry_run.options.sampling, dry_run.nominal_flop_rate);
  const Probe probe = run_probe(device, dry_run, plan, implementations, estimate);
  double estimated_seconds = 0, modelled_seconds = 0;
  for (PlannedConfiguration& configuration : plan) {
    std::vector<std::string> running;
    for (const Row& row : configuration.rows)
      if (row.status == Status::ok) running.push_back(row.implementation());
    if (running.empty()) continue;
    // The same modelled time that deals a sweep to shards, for the rows that would run.
    configuration.modelled_seconds =
        dry_run.rounds * modelled_run_seconds(configuration.problem, int(running.size()), dry_run.options.sampling,
                                              dry_run.nominal_flop_rate);
    // Rounds after the first are not checked.
    configuration.estimated_seconds =
        estimate.configuration_seconds(configuration.problem, running, planner.reference_flop(configuration.problem)) +
        (dry_run.rounds - 1) * estimate.configuration_seconds(configuration.problem, running, 0);
    estimated_seconds += configuration.estimated_seconds;
    modelled_seconds += configuration.modelled_seconds;
  }
  if (format == "json") print_json(out, dry_run, plan, probe, estimate, estimated_seconds, modelled_seconds);
  else print_table(out, dry_run, plan, implementations.size(), probe, estimate, estimated_seconds, modelled_seconds);
  return 0;
}

}  // namespace flashbench::cli
