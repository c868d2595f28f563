// flashbench run: one configuration or a sweep; every implementation timed (forward and backward
// apart) by the harness's runner, its memory measured per tag beside the analytic model, its outputs
// checked against the float64 reference.
#include <omp.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/errors.hpp"
#include "flashbench/peak.hpp"
#include "flashbench/report.hpp"
#include "flashbench/sweep.hpp"
#include "flashbench/units.hpp"

namespace flashbench::cli {

namespace {

struct RunFlags {
  std::optional<std::string> config;
  SweepOverrides sweep;
  std::string format = "table";
  std::optional<std::string> out;
  std::optional<std::string> mem_limit;
  uint64_t seed = RunOptions{}.seed;
  double input_scale = 1;
  bool no_check = false;
  double check_budget_gflop = RunOptions{}.reference_flop_budget / 1e9;
  bool cold = false;
  bool measure_peak = false;             // --peak: measure the CPU ceilings before the sweep
  std::optional<std::string> peak_file;  // --peak-file: take them from `info --peak --format json`
};

// The CPU ceilings a run reads its rates against: measured now with the run's threads, or read back
// from the "peak" object that `info --peak --format json` wrote.
PeakReport cpu_ceilings(const RunFlags& flags, const DeviceEntry& entry, int threads) {
  if (flags.measure_peak) return entry.measure_peak(threads, 2048, false);
  const std::string& path = *flags.peak_file;
  std::ifstream file(path);
  if (!file) throw UsageError(fmt::format("--peak-file: cannot read '{}'", path));
  const nlohmann::json document = nlohmann::json::parse(file, nullptr, false);
  const std::optional<PeakReport> peak =
      document.is_object() && document.contains("peak") ? peak_from_json(document.at("peak")) : std::nullopt;
  if (!peak)
    throw UsageError(fmt::format("--peak-file: '{}' is not the output of `flashbench info --peak --format json`", path));
  if (peak->threads != threads)
    fmt::print(stderr, "warning: --peak-file was measured with {} threads, this run uses {}\n", peak->threads, threads);
  return *peak;
}

// meta.cpu_peak: where the ceilings came from, the one the rates are read against, and what
// `info --peak` reports of them (less the per-product rates).
nlohmann::ordered_json ceilings_json(const PeakReport& peak, const std::string& source) {
  nlohmann::ordered_json j{{"source", source}, {"sgemm_ceiling_gflops", sgemm_ceiling(peak)}};
  const nlohmann::ordered_json measured = peak_to_json(peak);  // named: items() would outlive a temporary
  for (const auto& [key, value] : measured.items())
    if (key != "products") j[key] = value;
  return j;
}

// Where the report goes: stdout, or a file written atomically at the end (jsonl streams into the
// file instead, so an interrupted sweep keeps the rows it finished).
class Destination {
 public:
  Destination(const std::optional<std::string>& path, std::string_view format) : path_(path) {
    if (path_) check_writable(*path_);  // before the sweep, not after it
    if (path_ && format == "jsonl") {
      file_.open(*path_, std::ios::trunc);
      if (!file_) throw RuntimeFailure(fmt::format("cannot write '{}'", *path_));
    }
  }
  std::ostream& stream() {
    if (!path_) return std::cout;
    return file_.is_open() ? static_cast<std::ostream&>(file_) : buffer_;
  }
  bool terminal() const { return !path_ && isatty(STDOUT_FILENO); }
  void commit() {
    if (path_ && !file_.is_open()) write_file_atomically(*path_, buffer_.str());
  }

 private:
  std::optional<std::string> path_;
  std::ofstream file_;
  std::ostringstream buffer_;
};

// SIGINT or SIGTERM during a sweep: the first asks it to stop after the configuration in hand (its
// rows and every earlier one are written, marked incomplete); a second ends the process at once,
// leaving no half-written file (--out is written atomically at the end).
volatile std::sig_atomic_t stop_signal = 0;

extern "C" void request_stop(int signal_number) {
  if (stop_signal != 0) {
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
    return;
  }
  stop_signal = signal_number;
}

// Installs request_stop for the lifetime of a sweep and puts the previous handlers back after it.
class StopOnSignal {
 public:
  StopOnSignal() {
    stop_signal = 0;
    struct sigaction action {};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~StopOnSignal() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  int received() const { return stop_signal; }

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

std::string format_eta(double seconds) {
  if (seconds < 60) return fmt::format("{:.0f}s", seconds);
  return fmt::format("{:.0f}m{:02.0f}s", std::floor(seconds / 60), std::fmod(seconds, 60.0));
}

int run_sweep(const RunFlags& flags, const std::vector<std::string>& argv) {
  const SweepSpec spec = resolve_sweep(flags.config, flags.sweep);
  const std::vector<Problem> problems = expand(spec);
  const DeviceEntry& entry = registry().device(spec.backend);
  // Implementations by name (--impl) or the default one of each variant (--variant), checked before
  // the device opens so that a typo costs nothing.
  const std::vector<std::string> names = spec.implementations.empty() ? variant_names(spec.variants) : spec.implementations;
  std::vector<std::unique_ptr<Implementation>> implementations = select_implementations(entry, names);
  std::unique_ptr<Device> device = entry.open(DeviceOptions{.threads = spec.threads});

  RunOptions options;
  options.sampling = spec.sampling;
  options.seed = flags.seed;
  options.input_scale = flags.input_scale;
  options.check = !flags.no_check;
  options.reference_flop_budget = flags.check_budget_gflop * 1e9;
  options.cold = flags.cold;
  if (flags.mem_limit) options.mem_limit_bytes = parse_bytes(*flags.mem_limit);
  const int threads = omp_get_max_threads();

  std::optional<double> sgemm_ceiling_gflops;
  nlohmann::ordered_json meta = make_meta(argv);
  device->describe(meta);
  if (flags.measure_peak || flags.peak_file) {
    if (!entry.measure_peak)
      throw UsageError(fmt::format("--peak and --peak-file are for backends that measure their ceilings ({}), not {}",
                                   registry().device_with_peak().name, entry.name));
    const PeakReport peak = cpu_ceilings(flags, entry, threads);
    meta["cpu_peak"] = ceilings_json(peak, flags.measure_peak ? "measured" : *flags.peak_file);
    sgemm_ceiling_gflops = sgemm_ceiling(peak);
  }

  Destination destination(flags.out, flags.format);
  std::unique_ptr<Reporter> reporter = make_reporter(flags.format, destination.stream(), destination.terminal());
  reporter->begin(meta);

  std::vector<Implementation*> chosen;
  for (const auto& implementation : implementations) chosen.push_back(implementation.get());
  Runner runner(*device, options);
  const bool progress = isatty(STDERR_FILENO) && problems.size() > 1;
  const auto start = std::chrono::steady_clock::now();
  bool any_failed = false;
  const StopOnSignal stop;
  size_t finished = 0;
  for (size_t index = 0; index < problems.size() && !stop.received(); ++index, finished = index) {
    const Problem& problem = problems[index];
    if (progress) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string eta = index == 0 ? "" : " ETA " + format_eta(elapsed / index * (problems.size() - index));
      fmt::print(stderr, "\r\033[K[{}/{}] {}{}", index + 1, problems.size(), problem.describe(), eta);
    }
    for (Row& row : runner.run(problem, chosen)) {
      row.peak_gflops = sgemm_ceiling_gflops;
      any_failed |= row.status == Status::failed;
      reporter->add(row);
    }
  }
  if (progress) fmt::print(stderr, "\r\033[K");
  if (stop.received()) {
    nlohmann::ordered_json not_run = nlohmann::ordered_json::array();
    for (size_t index = finished; index < problems.size(); ++index) not_run.push_back(problems[index].describe());
    reporter->mark_incomplete(not_run);
  }
  reporter->finish();
  destination.commit();
  if (stop.received()) {
    fmt::print(stderr, "flashbench: stopped by {}: {} of {} configurations finished{}\n",
               stop.received() == SIGINT ? "SIGINT" : "SIGTERM", finished, problems.size(),
               flags.out ? fmt::format(", written to '{}'", *flags.out) : "");
    return 128 + stop.received();
  }
  return any_failed ? 1 : 0;
}

}  // namespace

void register_run(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* sub = app.add_subcommand("run", "Time and profile the variants on one configuration or a sweep");
  sub->footer(
      "Lists and ranges: --seq 1024,2048 or --seq 512:8192:x2 (geometric) or --head-dim 64:128:+32.\n"
      "Example: flashbench run --seq 4096 --heads 8 --head-dim 64 --causal --format json --out result.json");
  auto optional_string = [sub](const std::string& name, std::optional<std::string>& target, const std::string& help) {
    sub->add_option_function<std::string>(name, [&target](const std::string& value) { target = value; }, help);
  };
  optional_string("--config", flags->config, "JSON sweep file (see configs/); flags given here override it");
  optional_string("--seq,-n", flags->sweep.seq, "Sequence length N: list or range (default 1024)");
  optional_string("--heads", flags->sweep.heads, "Heads H (default 8)");
  optional_string("--head-dim,-d", flags->sweep.head_dim, "Head dim d, 1..256 (default 64)");
  optional_string("--batch,-b", flags->sweep.batch, "Batch B (default 1)");
  optional_string("--layers,-l", flags->sweep.layers, "Layers L of the chained stack (default 1)");
  sub->add_flag_function("--causal", [flags](int64_t) { flags->sweep.causal = "true"; }, "Apply the causal mask");
  optional_string("--mask", flags->sweep.causal, "Causal mask per configuration: true, false or both");
  optional_string("--variant,--variants", flags->sweep.variants,
                  "standard, v1, v2, checkpoint: list or all (default all); each runs its default implementation");
  optional_string("--impl", flags->sweep.implementations,
                  "Implementations by name instead, e.g. v2,v2.split (`flashbench info` lists them)");
  optional_string("--dtype", flags->sweep.dtype,
                  "Storage dtype: fp32 (default), bf16, fp16; on the CPU 16-bit storage with fp32 arithmetic");
  optional_string("--backend,--device", flags->sweep.backend, "cpu or cuda (default cpu)");
  sub->add_option_function<int>("--threads", [flags](int value) {
    if (value < 1) throw UsageError(fmt::format("--threads must be at least 1 (got {})", value));
    flags->sweep.threads = value;
  }, "OpenMP threads (default: all cores)");
  sub->add_option_function<int>("--warmup", [flags](int v) { flags->sweep.warmup = v; }, "Untimed runs first (default 1)");
  sub->add_option_function<double>("--warmup-time", [flags](double v) { flags->sweep.warmup_ms = v; },
                                   "... and at least this many ms of them");
  sub->add_option_function<int>("--min-samples", [flags](int v) { flags->sweep.min_samples = v; }, "At least this many timed samples (>= 5)");
  sub->add_option_function<int>("--max-samples", [flags](int v) { flags->sweep.max_samples = v; }, "At most this many");
  sub->add_option_function<double>("--max-noise", [flags](double v) { flags->sweep.max_noise = v; },
                                   "Stop once the median's relative noise is below this (default 0.02)");
  sub->add_option_function<double>("--max-time", [flags](double v) { flags->sweep.max_time_s = v; },
                                   "Or once this many seconds went into samples of one configuration (default 10)");
  sub->add_option("--format,-f", flags->format, std::string("Output format: ") + std::string(kReportFormats))
      ->capture_default_str();
  optional_string("--out,-o", flags->out, "Write the report to this file (atomically)");
  optional_string("--mem-limit", flags->mem_limit,
                  "Memory budget, e.g. 8GiB (default: what the device has free: MemAvailable, the GPU's free memory)");
  sub->add_option("--seed", flags->seed, "Seed of the random inputs")->check(CLI::NonNegativeNumber)->capture_default_str();
  sub->add_option_function<double>("--input-scale", [flags](double value) {
    if (!(value > 0 && std::isfinite(value))) throw UsageError(fmt::format("--input-scale must be a positive number (got {})", value));
    flags->input_scale = value;
  }, "Multiply the random input X_0 by this (default 1): the logits grow as its square, to probe fp16's range");
  sub->add_flag("--no-check", flags->no_check, "Skip comparing outputs and gradients with the float64 reference");
  sub->add_option_function<double>("--check-budget", [flags](double value) {
    if (!(value >= 0)) throw UsageError(fmt::format("--check-budget must be 0 or more GFLOP (got {})", value));
    flags->check_budget_gflop = value;
  }, "Most work the float64 reference may do per configuration [GFLOP] (default 250); beyond it the check "
     "compares sampled output rows (L = 1) or says `not checked`");
  sub->add_flag("--cold", flags->cold, "Flush the caches before every pass (CPU: the last-level cache; CUDA: the L2)");
  CLI::Option* peak = sub->add_flag("--peak", flags->measure_peak,
                                    "Measure this machine's fp32 FMA and sgemm ceilings first (about a second) and "
                                    "show each rate as % of the sgemm ceiling (CPU)");
  CLI::Option* peak_file = sub->add_option_function<std::string>(
      "--peak-file", [flags](const std::string& value) { flags->peak_file = value; },
      "... or take the ceilings from a file written by `flashbench info --peak --format json`");
  peak->excludes(peak_file);
  set_action(sub, [flags](const std::vector<std::string>& argv) { return run_sweep(*flags, argv); });
}

}  // namespace flashbench::cli
