// flashbench fit: for each variant, the largest N (or B) whose modelled peak fits a memory budget,
// optionally confirmed by running that point on the backend.
#include <omp.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/sweep.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/core/variant.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/model/model.hpp"
#include "flashbench/report/json.hpp"

namespace flashbench::cli {

namespace {

using nlohmann::ordered_json;

struct FitOptions {
  std::string budget;
  std::string search = "seq";
  Problem problem;
  std::string variants = "all";
  std::string dtype = "fp32";
  int threads = 0;
  std::string backend = "cpu";
  bool verify = false;
  std::string format = "table";
  int64_t context_parallel = 1;  // P devices of a ring (--cp); the budget is one device's
};

// What running the fitted point on the CPU showed.
struct Verification {
  std::string status;                // "ok", "skipped", "oom", "failed"
  std::string reason;
  std::optional<int64_t> measured_peak_bytes;
};

Verification verify_point(const DeviceEntry& entry, const Problem& problem, Variant variant, int threads) {
  // A point at the edge of a large budget can take hours on a CPU: say what is being run, and how
  // much, before it starts (stderr, so a JSON report on stdout stays clean).
  fmt::print(stderr, "fit --verify: {} at {}: {:.2g} FLOP forward and backward, {} threads ...\n", to_string(variant),
             problem.describe(), problem.forward_flop() + problem.backward_flop(), threads);
  const auto start = std::chrono::steady_clock::now();
  RunOptions options;
  options.sampling.warmup = 0;
  options.sampling.warmup_ms = 0;
  options.sampling.min_samples = 1;
  options.sampling.max_samples = 1;
  options.check = false;
  // The runner's pre-flight skips the point when it does not fit the memory available now.
  std::unique_ptr<Device> device = entry.open(DeviceOptions{.threads = threads});
  std::vector<std::unique_ptr<Implementation>> chosen = select_implementations(entry, {std::string(to_string(variant))});
  Implementation* implementations[] = {chosen.front().get()};
  const std::vector<Row> rows = Runner(*device, options).run(problem, implementations);
  const Row& row = rows.front();
  Verification verification{std::string(to_string(row.status)), row.reason, std::nullopt};
  if (row.status == Status::ok) verification.measured_peak_bytes = row.measured.peak_bytes;
  fmt::print(stderr, "fit --verify: {} done in {:.1f} s\n", to_string(variant),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return verification;
}

// "fits", or by how much the measured peak went over the budget.
std::string verdict(const Verification& verification, int64_t budget_bytes) {
  if (!verification.measured_peak_bytes)
    return verification.reason.empty() ? verification.status : verification.status + ": " + verification.reason;
  const int64_t over = *verification.measured_peak_bytes - budget_bytes;
  return over <= 0 ? "fits" : fmt::format("over budget by {}", format_bytes(over));
}

// The problem at a fitted point: the searched axis (N or B) set to `value`.
Problem at_point(const Problem& problem, FitAxis axis, int64_t value) {
  Problem point = problem;
  (axis == FitAxis::seq ? point.seq : point.batch) = value;
  return point;
}

// The search and what it found: each variant's largest point within the budget, and (--verify)
// what running it showed.
struct Fit {
  const DeviceEntry& entry;
  int64_t budget = 0;  // [bytes], one device's with --cp
  FitAxis axis = FitAxis::seq;
  Problem problem;     // as given; each point sets the searched axis
  int64_t ranks = 1;   // --cp
  int threads = 0;     // the model's
  std::vector<FitResult> results;  // one per variant, in --variant's order
  double search_ms = 0;            // the search's wall time [ms]
  std::optional<int64_t> standard_max;                   // the standard variant's largest, where it fits at all
  std::vector<std::optional<Verification>> verifications;  // [result], --verify

  Problem point(const FitResult& result) const { return at_point(problem, axis, result.max_value); }
};

// Checks the options against each other, then searches every variant's largest point.
Fit search_fits(const FitOptions& options) {
  const int64_t budget = parse_bytes(options.budget);
  const FitAxis axis = options.search == "batch" ? FitAxis::batch : FitAxis::seq;
  Problem problem = options.problem;
  problem.dtype = parse_dtype(options.dtype);
  validate(problem);
  const int64_t ranks = options.context_parallel;
  if (ranks < 1) throw UsageError(fmt::format("--cp {}: the number of devices must be at least 1", ranks));
  if (ranks > 1 && axis == FitAxis::batch) validate_context_parallel(problem, ranks);
  if (ranks > 1 && options.verify) throw UsageError("--verify runs one device; it cannot run a --cp split");
  // N is searched over the multiples the split needs: P chunks, or 2P for the causal zig-zag.
  const int64_t seq_step = ranks > 1 && problem.causal ? 2 * ranks : ranks;
  const DeviceEntry& entry = registry().device(options.backend);
  const ModelSource model = model_source(entry, DeviceOptions{.threads = options.threads}, ranks);
  Fit fit{entry, budget, axis, problem, ranks, model.threads, {}, 0, std::nullopt, {}};

  const auto start = std::chrono::steady_clock::now();
  for (Variant variant : parse_variant_list(options.variants, "--variant"))
    fit.results.push_back(fit_in_budget(model, problem, variant, axis, budget, seq_step));
  fit.search_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  for (const FitResult& result : fit.results)
    if (result.variant == Variant::standard && result.max_value > 0) fit.standard_max = result.max_value;
  fit.verifications.resize(fit.results.size());
  return fit;
}

// --verify: each variant's fitted point run on the backend.
void verify_fits(Fit& fit) {
  for (size_t i = 0; i < fit.results.size(); ++i)
    if (fit.results[i].max_value > 0)
      fit.verifications[i] = verify_point(fit.entry, fit.point(fit.results[i]), fit.results[i].variant, fit.threads);
}

// One variant's row of `fit --format json`.
ordered_json fit_row_json(const Fit& fit, const FitResult& result, const std::optional<Verification>& verification) {
  ordered_json row;
  row["variant"] = std::string(to_string(result.variant));
  row[fit.axis == FitAxis::seq ? "max_seq" : "max_batch"] = result.max_value;
  row["budget_bytes"] = result.budget_bytes;
  row["model_peak_bytes"] = result.model_peak_bytes;
  row["at_axis_limit"] = result.at_axis_limit;
  row["cp"] = fit.ranks;
  if (result.max_value > 0) {
    const Problem point = fit.point(result);
    const RingBytes ring = ring_bytes(point, fit.ranks, result.variant);
    row["sent_bytes"] = {{"forward_per_layer", ring.forward_sent_bytes},
                         {"backward_per_layer", ring.backward_sent_bytes},
                         {"stack", point.layers * (ring.forward_sent_bytes + ring.backward_sent_bytes)}};
  }
  if (fit.standard_max) row["ratio_to_standard"] = double(result.max_value) / double(*fit.standard_max);
  if (verification) {
    row["verify"]["status"] = verification->status;
    if (!verification->reason.empty()) row["verify"]["reason"] = verification->reason;
    if (verification->measured_peak_bytes) {
      row["verify"]["measured_peak_bytes"] = *verification->measured_peak_bytes;
      row["verify"]["fits"] = *verification->measured_peak_bytes <= fit.budget;
    }
  }
  return row;
}

void print_fit_json(const Fit& fit, const std::string& search) {
  ordered_json rows = ordered_json::array();
  for (size_t i = 0; i < fit.results.size(); ++i) rows.push_back(fit_row_json(fit, fit.results[i], fit.verifications[i]));
  ordered_json document{{"schema_version", kSchemaVersion},
                        {"command", "fit"},
                        {"backend", fit.entry.name},
                        {"search", search},
                        {"problem", problem_to_json(at_point(fit.problem, fit.axis, 0))},
                        {"threads", fit.threads},
                        {"rows", rows}};
  std::cout << document.dump(2) << '\n';
}

// One variant's line of the table (the --cp and --verify columns where they are shown).
std::vector<std::string> fit_line(const Fit& fit, const FitResult& result,
                                  const std::optional<Verification>& verification, bool verify) {
  std::vector<std::string> line = {
      std::string(to_string(result.variant)),
      result.max_value == 0 ? "none" : fmt::format("{}{}", result.max_value, result.at_axis_limit ? " (limit)" : ""),
      result.max_value == 0 ? "-" : format_bytes(result.model_peak_bytes),
      fit.standard_max ? fmt::format("{:.2f}x", double(result.max_value) / double(*fit.standard_max)) : "-"};
  if (fit.ranks > 1) {
    if (result.max_value > 0) {
      const RingBytes ring = ring_bytes(fit.point(result), fit.ranks, result.variant);
      line.insert(line.end(), {format_bytes(ring.forward_sent_bytes), format_bytes(ring.backward_sent_bytes)});
    } else {
      line.insert(line.end(), {"-", "-"});
    }
  }
  if (verify) {
    line.push_back(verification && verification->measured_peak_bytes ? format_bytes(*verification->measured_peak_bytes)
                                                                       : "-");
    line.push_back(verification ? verdict(*verification, fit.budget) : "-");
  }
  return line;
}

void print_fit_table(const Fit& fit, bool verify) {
  const Problem& problem = fit.problem;
  const FitAxis axis = fit.axis;
  const std::string fixed = axis == FitAxis::seq
                                ? fmt::format("B={} H={} d={} L={}", problem.batch, problem.heads, problem.head_dim, problem.layers)
                                : fmt::format("H={} N={} d={} L={}", problem.heads, problem.seq, problem.head_dim, problem.layers);
  const std::string workload = problem.workload();
  std::cout << fmt::format("largest {} within {} ({} bytes){}, {} model: {}{}{}{} {}, {} threads ({:.1f} ms)\n\n",
                           axis == FitAxis::seq ? "N" : "B", format_bytes(fit.budget), fit.budget,
                           fit.ranks > 1 ? fmt::format(" per device, {} devices in a ring{}", fit.ranks,
                                                       problem.causal ? " (zig-zag)" : "")
                                         : "",
                           fit.entry.name, fixed, workload.empty() ? "" : " ", workload, problem.causal ? " causal" : "",
                           to_string(problem.dtype), fit.threads, fit.search_ms);
  std::vector<std::string> header = {"variant", axis == FitAxis::seq ? "max N" : "max B", "model peak",
                                     "vs standard"};
  if (fit.ranks > 1) header.insert(header.end(), {"sent fwd/layer", "sent bwd/layer"});
  if (verify) header.insert(header.end(), {"measured peak", "verify"});
  std::vector<std::vector<std::string>> lines = {header};
  for (size_t i = 0; i < fit.results.size(); ++i)
    lines.push_back(fit_line(fit, fit.results[i], fit.verifications[i], verify));
  std::vector<size_t> widths(header.size(), 0);
  for (const auto& line : lines)
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  for (const auto& line : lines) {
    std::string text = fmt::format("{:<{}}", line[0], widths[0]);
    for (size_t c = 1; c < line.size(); ++c) text += fmt::format("  {:>{}}", line[c], widths[c]);
    std::cout << text << '\n';
  }
}

int run_fit(const FitOptions& options) {
  Fit fit = search_fits(options);
  if (options.verify) verify_fits(fit);
  if (options.format == "json")
    print_fit_json(fit, options.search);
  else
    print_fit_table(fit, options.verify);
  return 0;
}

}  // namespace

void register_fit(CLI::App& app) {
  auto options = std::make_shared<FitOptions>();
  CLI::App* sub = app.add_subcommand(
      "fit", "For each variant, the largest N (or B) whose modelled peak fits a memory budget");
  sub->add_option("--budget", options->budget, "Memory budget: 16GiB, 800MB, 1.5G (G = GiB), bytes")->required();
  sub->add_option("--search", options->search, "Axis to search: seq or batch")
      ->capture_default_str()
      ->check(CLI::IsMember({"seq", "batch"}));
  sub->add_option("--seq", options->problem.seq, "N, when searching batch")->capture_default_str();
  sub->add_option("--heads", options->problem.heads, "H, heads")->capture_default_str();
  sub->add_option("--head-dim", options->problem.head_dim, "d, head dim")->capture_default_str();
  sub->add_option("--batch", options->problem.batch, "B, when searching seq")->capture_default_str();
  sub->add_option("--layers", options->problem.layers, "L, layers in the stack")->capture_default_str();
  sub->add_flag("--causal", options->problem.causal, "Causal mask");
  add_workload_options(sub, options->problem);
  sub->add_option("--variant", options->variants, "all, or a comma list of " + variant_names())
      ->capture_default_str();
  sub->add_option("--dtype", options->dtype, "Storage dtype: fp32, bf16, fp16")->capture_default_str();
  sub->add_option("--threads", options->threads, "CPU threads the workspace is sized for (default: all cores)");
  add_isa_option(sub);
  sub->add_option("--backend,--device", options->backend,
                  "Whose model: " + registry().device_names() + " (no GPU needed)")->capture_default_str();
  sub->add_option("--cp", options->context_parallel,
                  "Context parallelism: N split over this many devices of --budget each (ring attention; causal: "
                  "zig-zag); N is searched over multiples of P (2P when causal)")
      ->capture_default_str();
  sub->add_flag("--verify", options->verify,
                "Run each variant's largest fitting point on the backend (one sample) and show its measured peak");
  sub->add_option("--format", options->format, "table or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  set_action(sub, [options](const std::vector<std::string>&) { return run_fit(*options); });
}

}  // namespace flashbench::cli
