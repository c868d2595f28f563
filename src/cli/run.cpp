// flashbench run: one configuration or a sweep; every implementation timed (forward and backward
// apart) by the harness's runner, its memory measured per tag beside the analytic model, its outputs
// checked against the float64 reference.
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "dry_run.hpp"
#include "exports.hpp"
#include "progress.hpp"
#include "run_estimate.hpp"
#include "flashbench/core/environment.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/input_file.hpp"
#include "flashbench/core/peak.hpp"
#include "flashbench/core/shard.hpp"
#include "flashbench/core/sweep.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/core/variant.hpp"
#include "flashbench/harness/plugins.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/harness/runner.hpp"
#include "flashbench/model/model.hpp"
#include "flashbench/report/files.hpp"
#include "flashbench/report/json.hpp"
#include "flashbench/report/reporter.hpp"
#include "flashbench/report/results_file.hpp"
#include "flashbench/report/sweep_results.hpp"
#include "flashbench/report/trace.hpp"

namespace flashbench::cli {

namespace {

struct RunFlags {
  std::optional<std::string> config;
  SweepOverrides sweep;
  std::string format = "table";
  bool wide = false;                     // --wide: every column of the table, whatever the width
  std::optional<std::string> out;
  std::optional<std::string> mem_limit;
  uint64_t seed = RunOptions{}.seed;
  double input_scale = 1;
  bool no_check = false;
  double check_budget_gflop = RunOptions{}.reference_flop_budget / 1e9;
  bool cold = false;
  bool measure_peak = false;             // --peak: measure the CPU ceilings before the sweep
  std::optional<std::string> peak_file;  // --peak-file: take them from `info --peak --format json`
  std::optional<std::string> shard;      // --shard I/N, auto, auto/N
  bool resume = false;                   // --resume: keep what --out already holds of this shard
  int device_index = 0;                  // --device-index: which GPU
  std::optional<std::string> trace;      // --trace: a directory for one memory trace per row
  int rounds = 1;                        // --rounds: passes over the sweep, each timing every row again
  bool dry_run = false;                  // --dry-run: print the plan, measure nothing
  ExportFlags exports;                   // --export-json, --export-csv, --export-md
  bool progress = false;                 // --progress: on stderr even when it is not a terminal
  bool profile = false;                  // --profile: one warm-up, one sample, device ranges for Nsight
  std::optional<double> time_budget_s;   // --time-budget: the whole sweep's wall time [s]
  std::vector<std::string> plugins;      // --plugin: shared libraries whose implementations join the registry
};

// --profile: one warm-up (the measured pass is it) and one sample per implementation, the work
// named as device ranges, for a profiler to look at rather than a timing to trust. The sampling
// flags would contradict it.
void apply_profile(const RunFlags& flags, SweepSpec& spec, RunOptions& options) {
  const SweepOverrides& o = flags.sweep;
  if (o.warmup || o.warmup_ms || o.min_samples || o.max_samples || o.max_noise || o.max_time_s)
    throw UsageError("--profile sets one warm-up and one sample: drop --warmup, --warmup-time, --min-samples, "
                     "--max-samples, --max-noise and --max-time");
  spec.sampling.warmup = 1;
  spec.sampling.warmup_ms = 0;
  spec.sampling.min_samples = 1;
  spec.sampling.max_samples = 1;
  // One sample has no spread to measure (its noise reads 100 %): no target, so no warning that
  // advises quieting the machine for a run that takes one sample by design.
  spec.sampling.max_noise = 1.0;
  options.name_ranges = true;
}

// The ISA the run's kernels use, as its device described it (meta.cpu_isa.active); "" where the
// device has one only.
std::string active_isa(const nlohmann::ordered_json& meta) {
  if (!meta.contains("cpu_isa") || !meta["cpu_isa"].contains("active")) return "";
  return meta["cpu_isa"]["active"].get<std::string>();
}

// The CPU ceilings a run reads its rates against: measured now with the run's threads, or read back
// from the "peak" object that `info --peak --format json` wrote.
PeakReport cpu_ceilings(const RunFlags& flags, const DeviceEntry& entry, int threads, const nlohmann::ordered_json& meta) {
  if (flags.measure_peak) return entry.measure_peak(threads, 2048, false);
  const std::string& path = *flags.peak_file;
  const nlohmann::json document =
      parse_json_bounded<nlohmann::json>(read_input_file(path, "--peak-file", kMaxConfigFileBytes), path, false);
  const std::optional<PeakReport> peak =
      document.is_object() && document.contains("peak") ? peak_from_json(document.at("peak")) : std::nullopt;
  if (!peak)
    throw UsageError(fmt::format("--peak-file: '{}' is not the output of `flashbench info --peak --format json`", path));
  if (peak->threads != threads)
    fmt::print(stderr, "warning: --peak-file was measured with {} threads, this run uses {}\n", peak->threads, threads);
  // The ISA the file's ceilings were measured on against the one this run's kernels use (the device
  // said which in meta.cpu_isa, where it has several).
  if (const std::string isa = active_isa(meta); !peak->simd.empty() && !isa.empty() && peak->simd != isa)
    fmt::print(stderr, "warning: --peak-file was measured on the {} kernels, this run's are {}\n", peak->simd, isa);
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
// file instead, so an interrupted sweep keeps the rows it finished). A resumed jsonl streams into a
// temporary file next to --out that replaces it once the rows it keeps are in (publish), so the
// earlier rows are never lost nor half-rewritten.
class Destination {
 public:
  Destination(const std::optional<std::string>& path, std::string_view format, bool resumed) : path_(path) {
    if (!path_ || format != "jsonl") return;
    stream_path_ = *path_;
    if (resumed) {
      const std::filesystem::path target(*path_);
      const std::filesystem::path directory = target.has_parent_path() ? target.parent_path() : ".";
      std::string temp = (directory / fmt::format(".{}.XXXXXX", target.filename().string())).string();
      const int fd = mkstemp(temp.data());
      if (fd < 0) throw RuntimeFailure(fmt::format("cannot create a temporary file next to '{}': {}", *path_, std::strerror(errno)));
      ::fchmod(fd, 0644);  // mkstemp creates 0600; results are ordinary files
      ::close(fd);
      stream_path_ = temp;
      temporary_ = true;
    }
    file_.open(stream_path_, std::ios::trunc);
    if (!file_) throw RuntimeFailure(fmt::format("cannot write '{}'", *path_));
  }
  ~Destination() {
    if (temporary_) std::remove(stream_path_.c_str());  // never published
  }
  Destination(const Destination&) = delete;
  Destination& operator=(const Destination&) = delete;
  std::ostream& stream() {
    if (!path_) return std::cout;
    return file_.is_open() ? static_cast<std::ostream&>(file_) : buffer_;
  }
  bool terminal() const { return !path_ && isatty(STDOUT_FILENO); }
  // The stream's file becomes --out (a resumed jsonl, once its kept rows are written).
  void publish() {
    if (!temporary_) return;
    file_.flush();
    if (!file_ || std::rename(stream_path_.c_str(), path_->c_str()) != 0)
      throw RuntimeFailure(fmt::format("cannot write '{}': {}", *path_, std::strerror(errno)));
    temporary_ = false;
  }
  void commit() {
    publish();
    if (path_ && !file_.is_open()) write_file_atomically(*path_, buffer_.str());
  }

 private:
  std::optional<std::string> path_;
  std::string stream_path_;  // the file jsonl streams into
  bool temporary_ = false;   // stream_path_ is a temporary file not yet renamed over --out
  std::ofstream file_;
  std::ostringstream buffer_;
};

// What an earlier run of this same shard left in --out (--resume): nothing when there is no file
// yet, or an empty one (killed before its first line). Anything else that is not this shard of this
// sweep is refused: appending to it would mix sweeps.
std::optional<ResultsFile> earlier_results(const std::string& path, const SweepRecord& sweep) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) return std::nullopt;
  if (!fs::is_regular_file(status)) throw UsageError(fmt::format("--resume: '{}' is not a regular file", path));
  ResultsFile file = read_results_file(path);
  if (file.meta.is_null() && file.rows.empty()) return std::nullopt;
  require_our_schema(file, path);
  const std::optional<SweepRecord> earlier = sweep_record_of(file.meta, path);
  if (!earlier)
    throw UsageError(fmt::format("--resume: '{}' records no sweep (an older flashbench wrote it); not resuming into it", path));
  if (earlier->hash != sweep.hash || earlier->shard.index != sweep.shard.index ||
      earlier->shard.count != sweep.shard.count || earlier->plan != sweep.plan)
    throw UsageError(fmt::format("--resume: '{}' holds shard {}/{} of sweep {}, this run is shard {}/{} of sweep {}; "
                                 "not resuming into it",
                                 path, earlier->shard.index, earlier->shard.count, earlier->hash, sweep.shard.index,
                                 sweep.shard.count, sweep.hash));
  if (file.cut_last_line)
    fmt::print(stderr, "flashbench: --resume: the last line of '{}' was cut short; its configuration runs again\n", path);
  return file;
}

// meta.resumed_from: every earlier run whose rows a resumed file keeps, oldest first, each as its
// own meta said (the machine, the build, the time), so that a requeue on another node stays visible.
nlohmann::ordered_json earlier_runs(const nlohmann::ordered_json& earlier_meta) {
  nlohmann::ordered_json runs = earlier_meta.contains("resumed_from") ? earlier_meta.at("resumed_from")
                                                                      : nlohmann::ordered_json::array();
  nlohmann::ordered_json run = earlier_meta;
  for (const char* key : {"resumed_from", "complete", "not_run"}) run.erase(key);
  runs.push_back(std::move(run));
  return runs;
}

// The run's choices beside the sweep file that decide what its rows hold: shards and resumed runs
// must agree on them.
nlohmann::ordered_json run_settings(const RunFlags& flags, const RunOptions& options) {
  return {{"seed", options.seed},
          {"check", options.check},
          {"check_budget_gflop", flags.check_budget_gflop},
          {"cold", options.cold},
          {"mem_limit", json_or_null(flags.mem_limit)}};
}

// A configuration's rows across --rounds: the first round's (memory, check, trace) and the timings of
// every round, folded into the rows once its last round is done.
struct ConfigurationRounds {
  std::vector<Row> rows;
  std::vector<std::vector<TimingSummary>> fwd, bwd;  // [implementation][round]

  void add_first(std::vector<Row> first) {
    rows = std::move(first);
    fwd.assign(rows.size(), {});
    bwd.assign(rows.size(), {});
    for (size_t k = 0; k < rows.size(); ++k) add(k, rows[k], 0);
  }
  // Row k as timed again in `round`: its timings, or the reason it stopped (no later round runs it).
  void add(size_t k, const Row& timed, int round) {
    if (timed.status != Status::ok) {
      rows[k].status = timed.status;
      rows[k].reason = round == 0 ? timed.reason : fmt::format("round {}: {}", round + 1, timed.reason);
      return;
    }
    fwd[k].push_back(timed.fwd);
    bwd[k].push_back(timed.bwd);
  }
  // The rows with every round's samples and round medians (rows of one round stay as they were).
  std::vector<Row> finish(int rounds, double max_noise) {
    if (rounds > 1)
      for (size_t k = 0; k < rows.size(); ++k)
        if (rows[k].status == Status::ok) {
          rows[k].fwd = merge_rounds(fwd[k], max_noise);
          rows[k].bwd = merge_rounds(bwd[k], max_noise);
        }
    return std::move(rows);
  }
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

// The host's state comes from / and the process's environment; FLASHBENCH_HOST_ROOT, for the tests
// alone, reads a fake /proc and /sys tree instead.
EnvironmentSource host_environment_source() {
  EnvironmentSource source = EnvironmentSource::system();
  if (const char* root = std::getenv("FLASHBENCH_HOST_ROOT")) source.root = root;
  return source;
}

// run --time-budget: the sweep's wall time shared out among its steps (a configuration in one round)
// by their modelled time. Past its share a step stops sampling at --min-samples, past the budget's
// end at one sample; once nothing is left, no further step starts.
class TimeBudget {
 public:
  TimeBudget(std::optional<double> seconds, std::vector<double> weights, int rounds)
      : seconds_(seconds), weights_(std::move(weights)), rounds_(rounds), start_(std::chrono::steady_clock::now()) {
    for (double weight : weights_) round_weight_ += weight;
  }
  bool limited() const { return seconds_.has_value(); }
  double elapsed_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  double seconds() const { return seconds_.value_or(0); }
  // The deadline of step (round, index), or none without a budget; nullopt too once the budget is
  // spent, which spent() then says.
  std::optional<std::chrono::steady_clock::time_point> deadline(int round, size_t index) {
    if (!seconds_) return std::nullopt;
    const double left = *seconds_ - elapsed_s();
    if (left <= 0) {
      spent_ = true;
      return std::nullopt;
    }
    double remaining = double(rounds_ - round - 1) * round_weight_;
    for (size_t i = index; i < weights_.size(); ++i) remaining += weights_[i];
    const double share = remaining > 0 ? left * weights_[index] / remaining : left;
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(share));
  }
  bool spent() const { return spent_; }
  // When the whole budget runs out.
  std::chrono::steady_clock::time_point end() const {
    return start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds()));
  }

 private:
  std::optional<double> seconds_;
  std::vector<double> weights_;  // each configuration's modelled time, one round
  double round_weight_ = 0;
  int rounds_ = 1;
  std::chrono::steady_clock::time_point start_;
  bool spent_ = false;
};

// --resume reads --out back, so it needs a file of a format it can read, named for that format.
void require_resumable_out(const RunFlags& flags) {
  const bool lines_name = flags.out && flags.out->ends_with(".jsonl");
  if (!flags.out || (flags.format != "json" && flags.format != "jsonl") || lines_name != (flags.format == "jsonl"))
    throw UsageError("--resume reads --out back: it needs --out and --format json (a .json name) or jsonl (a .jsonl name)");
}

// The run's flags into the runner's options (after apply_profile, which may have set the sampling).
void apply_run_flags(const RunFlags& flags, const SweepSpec& spec, RunOptions& options) {
  options.sampling = spec.sampling;
  options.seed = flags.seed;
  options.input_scale = flags.input_scale;
  options.check = !flags.no_check;
  options.reference_flop_budget = flags.check_budget_gflop * 1e9;
  options.cold = flags.cold;
  if (flags.mem_limit) options.mem_limit_bytes = parse_bytes(*flags.mem_limit);
}

// The implementations a sweep runs on every configuration: owned, and by pointer and by name, in order.
struct ChosenImplementations {
  std::vector<std::unique_ptr<Implementation>> owned;
  std::vector<Implementation*> list;
  std::vector<std::string> names;
};

ChosenImplementations choose_implementations(const DeviceEntry& entry, const std::vector<std::string>& names) {
  ChosenImplementations chosen;
  chosen.owned = select_implementations(entry, names);
  for (const auto& implementation : chosen.owned) {
    chosen.list.push_back(implementation.get());
    chosen.names.emplace_back(implementation->name());
  }
  return chosen;
}

// What this process runs of the sweep, and what an earlier run of its share left (--resume).
struct SweepShare {
  Shard shard;
  SweepRecord sweep;
  std::optional<ResultsFile> earlier;   // --out as an earlier run of this share left it (--resume)
  std::vector<Problem> configurations;  // this shard's, in the sweep's order
  std::vector<Problem> to_run;          // ... less those `earlier` holds whole
  std::set<std::string> kept;           // describe() of those `earlier` holds whole: its rows are kept
  size_t already_done() const { return configurations.size() - to_run.size(); }
};

// The whole sweep is dealt to the shards by modelled time; this process runs its share, in the
// sweep's order, less what an earlier run of the same share finished (--resume). Says on stderr
// which share it is, and how much of it was already done.
SweepShare plan_share(const RunFlags& flags, const SweepSpec& spec, const RunOptions& options,
                      const std::vector<Problem>& problems, const ChosenImplementations& chosen,
                      const DeviceEntry& entry) {
  SweepShare s;
  s.shard = flags.shard ? parse_shard(*flags.shard, process_environment()) : Shard{};
  std::vector<double> costs;
  for (const Problem& problem : problems)
    costs.push_back(modelled_run_seconds(problem, int(chosen.list.size()), spec.sampling, entry.nominal_flop_rate));
  nlohmann::ordered_json settings = run_settings(flags, options);
  if (flags.rounds > 1) settings["rounds"] = flags.rounds;  // one round: the hash of runs made before rounds
  s.sweep = make_sweep_record(spec, std::move(settings), chosen.names, costs, s.shard);
  s.earlier = flags.resume ? earlier_results(*flags.out, s.sweep) : std::nullopt;
  const std::vector<bool> done = s.earlier ? whole_configurations(problems, chosen.names, spec.backend, s.earlier->rows)
                                           : std::vector<bool>(problems.size(), false);
  for (size_t i = 0; i < problems.size(); ++i) {
    if (s.sweep.plan[i] != s.shard.index) continue;
    s.configurations.push_back(problems[i]);
    if (!done[i]) s.to_run.push_back(problems[i]);
    else s.kept.insert(problems[i].describe());
  }
  if (s.shard.count > 1)
    fmt::print(stderr, "flashbench: shard {}/{} (from {}): {} of the sweep's {}\n", s.shard.index, s.shard.count,
               s.shard.source, s.configurations.size(), counted(int64_t(problems.size()), "configuration"));
  if (s.earlier)
    fmt::print(stderr, "flashbench: resuming '{}': {} of {} already there, {} to run\n", *flags.out,
               s.already_done(), counted(int64_t(s.configurations.size()), "configuration"), s.to_run.size());
  return s;
}

// --peak or --peak-file: the CPU ceilings into meta.cpu_peak, and the sgemm ceiling the rows' rates
// are read against; nothing without them. Measured with the threads of the device just opened.
std::optional<double> measure_sgemm_ceiling(const RunFlags& flags, const DeviceEntry& entry,
                                            nlohmann::ordered_json& meta) {
  if (!flags.measure_peak && !flags.peak_file) return std::nullopt;
  if (!entry.measure_peak)
    throw UsageError(fmt::format("--peak and --peak-file are for backends that measure their ceilings ({}), not {}",
                                 registry().device_with_peak().name, entry.name));
  const PeakReport peak = cpu_ceilings(flags, entry, omp_get_max_threads(), meta);
  meta["cpu_peak"] = ceilings_json(peak, flags.measure_peak ? "measured" : *flags.peak_file);
  return sgemm_ceiling(peak);
}

// meta.plugins: which libraries the rows of plugin implementations came from (absent when none was
// loaded).
void describe_plugins(nlohmann::ordered_json& meta, const std::vector<PluginDescription>& plugins) {
  for (const PluginDescription& plugin : plugins) {
    nlohmann::ordered_json names = nlohmann::ordered_json::array();
    for (const PluginOffer& offer : plugin.implementations) names.push_back(offer.name);
    meta["plugins"].push_back(
        {{"path", plugin.path}, {"name", plugin.name}, {"abi_version", plugin.abi_version}, {"implementations", names}});
  }
}

// The environment's warnings, said once the sweep starts, every flag accepted: a usage error stays
// its one line. What the report wrote so far goes out first, so that stdout and stderr sharing a
// file or a terminal do not interleave the warning into the middle of a table.
void print_warnings(const std::vector<std::string>& warnings) {
  if (!warnings.empty()) {
    std::cout.flush();
    std::fflush(stdout);
  }
  for (const std::string& warning : warnings) fmt::print(stderr, "flashbench: warning: {}\n", warning);
}

// The meta known only at the end: the load average then, and what other processes used while this
// one ran (what compare's load bound reads first).
void record_end_environment(Reporter& reporter, const EnvironmentSource& host,
                            const std::optional<CpuTimes>& cpu_times_start) {
  reporter.set_meta_at_end("/environment/load_average_end", load_average_json(read_load_average(host)));
  const std::optional<CpuTimes> cpu_times_end = read_cpu_times(host);
  const std::optional<double> others = cpu_times_start && cpu_times_end
                                           ? other_cpu_load(*cpu_times_start, *cpu_times_end) : std::nullopt;
  reporter.set_meta_at_end("/environment/other_cpu_load", others ? nlohmann::ordered_json(*others) : nullptr);
}

// The report's rows as they go to the reporter: whether any failed (the exit code), and how many (the
// line that says where they went).
class RowWriter {
 public:
  explicit RowWriter(Reporter& reporter) : reporter_(reporter) {}
  void add(const Row& row) {
    any_failed_ |= row.status == Status::failed;
    reporter_.add(row);
    ++count_;
  }
  Reporter& reporter() { return reporter_; }
  bool any_failed() const { return any_failed_; }
  size_t count() const { return count_; }

 private:
  Reporter& reporter_;
  bool any_failed_ = false;
  size_t count_ = 0;
};

// The earlier rows of whole configurations, as they were; a configuration cut short runs again.
void keep_earlier_rows(const SweepShare& share, RowWriter& rows) {
  if (!share.earlier) return;
  for (const Row& row : share.earlier->rows)
    if (share.kept.contains(row.problem.describe())) rows.add(row);
}

// Each of the rows' memory timelines into the --trace directory.
void write_traces(const std::string& directory, const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    try {  // a trace lost is said, not worth the sweep's results
      write_trace_file(directory, row);
    } catch (const RuntimeFailure& e) {
      fmt::print(stderr, "flashbench: warning: --trace: {}\n", e.what());
    }
  }
}

// The share's configurations run round after round: the runners (the first round's, which checks
// and traces, and the later rounds', which only time), the progress, the time budget, and what the
// rounds gathered, until each configuration's rows are reported.
class SweepRun {
 public:
  SweepRun(const RunFlags& flags, const SweepSpec& spec, const DeviceEntry& entry, Device& device,
           const RunOptions& options, const std::vector<Problem>& to_run, const ChosenImplementations& chosen,
           RowWriter& rows, Destination& destination, const StopOnSignal& stop,
           std::optional<double> sgemm_ceiling_gflops);
  SweepRun(const SweepRun&) = delete;  // the runners call back into it
  SweepRun& operator=(const SweepRun&) = delete;

  void run_rounds();
  // The progress line off, the configurations the budget cut after some rounds reported with the
  // rounds they ran, and those not run named in the report.
  void finish();
  // What the run says at its end on stderr, and its exit code. `exported`: Exports::describe().
  int conclude(const std::string& exported) const;

 private:
  static RunOptions timing_options(RunOptions options);
  std::optional<SweepProgress> make_progress(const SweepSpec& spec, const DeviceEntry& entry) const;
  TimeBudget make_budget(const SweepSpec& spec, const DeviceEntry& entry) const;
  bool go_on() const { return !stop_.received() && !budget_.spent(); }
  void run_first_round(size_t index);
  void run_later_round(size_t index, int round);
  void report_configuration(size_t index);

  const RunFlags& flags_;
  const double max_noise_;
  const std::vector<Problem>& to_run_;
  const ChosenImplementations& chosen_;
  RowWriter& rows_;
  Destination& destination_;
  const StopOnSignal& stop_;
  const std::optional<double> sgemm_ceiling_gflops_;
  Runner runner_;
  Runner timing_runner_;  // rounds after the first only time: the first checked the outputs and recorded the traces
  std::optional<SweepProgress> progress_;
  TimeBudget budget_;
  std::vector<ConfigurationRounds> configurations_;
  size_t finished_ = 0;  // configurations whose every round is done, reported
  // Which configuration and round the runners are on, and the implementations they were given.
  size_t current_index_ = 0;
  int current_round_ = 0;
  std::vector<Implementation*> current_list_;
};

SweepRun::SweepRun(const RunFlags& flags, const SweepSpec& spec, const DeviceEntry& entry, Device& device,
                   const RunOptions& options, const std::vector<Problem>& to_run, const ChosenImplementations& chosen,
                   RowWriter& rows, Destination& destination, const StopOnSignal& stop,
                   std::optional<double> sgemm_ceiling_gflops)
    : flags_(flags),
      max_noise_(spec.sampling.max_noise),
      to_run_(to_run),
      chosen_(chosen),
      rows_(rows),
      destination_(destination),
      stop_(stop),
      sgemm_ceiling_gflops_(sgemm_ceiling_gflops),
      runner_(device, options),
      timing_runner_(device, timing_options(options)),
      progress_(make_progress(spec, entry)),
      budget_(make_budget(spec, entry)),
      configurations_(to_run.size()) {
  const auto report_start = [this](const Problem& problem, size_t k) {
    if (progress_) progress_->starting(current_index_, current_round_, k, current_list_[k]->name(), problem);
  };
  runner_.on_start(report_start);
  timing_runner_.on_start(report_start);
}

RunOptions SweepRun::timing_options(RunOptions options) {
  options.check = false;
  options.record_timeline = false;
  return options;
}

// Progress on a terminal, or wherever --progress asks: never into a pipe or a log unasked.
std::optional<SweepProgress> SweepRun::make_progress(const SweepSpec& spec, const DeviceEntry& entry) const {
  const bool terminal = isatty(STDERR_FILENO);
  if (!flags_.progress && !(terminal && to_run_.size() * chosen_.list.size() * size_t(flags_.rounds) > 1))
    return std::nullopt;
  std::vector<SweepProgress::Configuration> sweep_configurations;
  for (const Problem& problem : to_run_)
    sweep_configurations.push_back({problem, modelled_run_seconds(problem, 1, spec.sampling, entry.nominal_flop_rate),
                                    runner_.reference_flop(problem)});
  return SweepProgress(stderr, terminal, std::move(sweep_configurations), chosen_.names, flags_.rounds,
                       RunEstimate(spec.sampling, entry.nominal_flop_rate));
}

// A step's share of the budget follows its work: its passes at the floor of the stopping rule
// (the --max-time clamp would give every configuration alike the same share).
TimeBudget SweepRun::make_budget(const SweepSpec& spec, const DeviceEntry& entry) const {
  std::vector<double> step_weights;
  SamplingPolicy floor_policy = spec.sampling;
  floor_policy.max_time_s = 0;
  for (const Problem& problem : to_run_)
    step_weights.push_back(modelled_run_seconds(problem, int(chosen_.list.size()), floor_policy, entry.nominal_flop_rate));
  return TimeBudget(flags_.time_budget_s, std::move(step_weights), flags_.rounds);
}

void SweepRun::run_rounds() {
  // Round by round over the whole share, so that what changes on the machine during the run falls
  // on every configuration's rounds alike rather than on one configuration's.
  for (int round = 0; round < flags_.rounds && go_on(); ++round) {
    for (size_t index = 0; index < to_run_.size() && go_on(); ++index) {
      current_index_ = index;
      current_round_ = round;
      if (budget_.limited()) {
        const auto deadline = budget_.deadline(round, index);
        if (budget_.spent()) break;
        runner_.set_deadlines(deadline, budget_.end());
        timing_runner_.set_deadlines(deadline, budget_.end());
      }
      if (round == 0)
        run_first_round(index);
      else
        run_later_round(index, round);
      if (round + 1 == flags_.rounds) report_configuration(index);
    }
  }
}

// Every implementation measured, checked and (--trace) traced.
void SweepRun::run_first_round(size_t index) {
  ConfigurationRounds& configuration = configurations_[index];
  current_list_ = chosen_.list;
  configuration.add_first(runner_.run(to_run_[index], chosen_.list));
  if (progress_) progress_->finished(index, 0, configuration.rows);
  if (flags_.trace) write_traces(*flags_.trace, configuration.rows);
}

// The implementations still ok timed again, each round starting from another, so that none is
// always first.
void SweepRun::run_later_round(size_t index, int round) {
  ConfigurationRounds& configuration = configurations_[index];
  std::vector<size_t> order;
  for (size_t k = 0; k < chosen_.list.size(); ++k)
    if (configuration.rows[k].status == Status::ok) order.push_back(k);
  if (!order.empty()) std::rotate(order.begin(), order.begin() + (round % order.size()), order.end());
  std::vector<Implementation*> timed;
  for (size_t k : order) timed.push_back(chosen_.list[k]);
  current_list_ = timed;
  const std::vector<Row> rows = timing_runner_.run(to_run_[index], timed);
  for (size_t i = 0; i < order.size(); ++i) configuration.add(order[i], rows[i], round);
  if (progress_) progress_->finished(index, round, rows);
}

// Configuration `index`'s rows, with the rounds it ran, to the reporter, and its block out now,
// not when the next one is done; the progress line off the screen first, so that no frozen
// "[k/n] ..." stays above the table.
void SweepRun::report_configuration(size_t index) {
  for (Row& row : configurations_[index].finish(flags_.rounds, max_noise_)) {
    row.peak_gflops = sgemm_ceiling_gflops_;
    rows_.add(row);
  }
  if (progress_) progress_->clear();
  rows_.reporter().end_configuration();
  destination_.stream().flush();
  finished_ = index + 1;
}

void SweepRun::finish() {
  if (progress_) progress_->finish();
  if (budget_.spent() && flags_.rounds > 1)
    // The configurations that ran some rounds before the budget ran out: their rows with those rounds.
    for (size_t index = finished_; index < to_run_.size() && !configurations_[index].rows.empty(); ++index)
      report_configuration(index);
  if (stop_.received() || budget_.spent()) {
    nlohmann::ordered_json not_run = nlohmann::ordered_json::array();
    for (size_t index = finished_; index < to_run_.size(); ++index) not_run.push_back(to_run_[index].describe());
    rows_.reporter().mark_incomplete(not_run);
  }
}

int SweepRun::conclude(const std::string& exported) const {
  // Where the results went, when not to the screen: a silent success looks like a lost result.
  if (!stop_.received() && (flags_.out || !exported.empty())) {
    std::string where = flags_.out ? fmt::format("'{}'", *flags_.out) : std::string();
    if (!exported.empty()) where += flags_.out ? ", and " + exported : exported;
    fmt::print(stderr, "flashbench: {} written to {}\n", counted(int64_t(rows_.count()), "row"), where);
  }
  if (budget_.spent() && !stop_.received())
    fmt::print(stderr, "flashbench: warning: --time-budget {:g} s spent after {:.1f} s: {} of {} finished, the rest not "
                       "run{}\n",
               budget_.seconds(), budget_.elapsed_s(), finished_, counted(int64_t(to_run_.size()), "configuration"),
               flags_.out ? " (the file lists them: meta.not_run)" : "");
  else if (budget_.limited() && budget_.elapsed_s() > budget_.seconds() && !stop_.received())
    // What the budget cannot cut: the float64 checks, set-up, the measured pass and one sample of each.
    fmt::print(stderr, "flashbench: warning: the run took {:.1f} s of its {:g} s --time-budget: the float64 checks, "
                       "set-up and one sample of each implementation are not cut (--no-check or fewer configurations "
                       "make it shorter)\n",
               budget_.elapsed_s(), budget_.seconds());
  if (stop_.received()) {
    fmt::print(stderr, "flashbench: stopped by {}: {} of {} finished{}\n",
               stop_.received() == SIGINT ? "SIGINT" : "SIGTERM", finished_,
               counted(int64_t(to_run_.size()), "configuration"),
               flags_.out ? fmt::format(", written to '{}'", *flags_.out) : "");
    return 128 + stop_.received();
  }
  return rows_.any_failed() ? 1 : 0;
}

int run_sweep(const RunFlags& flags, const std::vector<std::string>& argv) {
  // Before anything asks the registry: a plugin's implementations are named like the built-in ones.
  const std::vector<PluginDescription> plugins = load_plugins(flags.plugins);
  SweepSpec spec = resolve_sweep(flags.config, flags.sweep);
  RunOptions options;
  if (flags.profile) apply_profile(flags, spec, options);
  const std::vector<Problem> problems = expand(spec);
  const DeviceEntry& entry = registry().device(spec.backend);
  // Implementations by name (--impl) or the default one of each variant (--variant), checked before
  // the device opens so that a typo costs nothing.
  const std::vector<std::string> names = spec.implementations.empty() ? variant_names(spec.variants) : spec.implementations;
  const ChosenImplementations chosen = choose_implementations(entry, names);
  if (flags.resume) require_resumable_out(flags);

  apply_run_flags(flags, spec, options);
  // What the run writes must be writable before anything is measured.
  if (flags.out) check_writable(*flags.out);
  Exports exports(flags.exports, flags.out);
  if (flags.trace && !flags.dry_run) prepare_trace_directory(*flags.trace);  // a dry run creates nothing
  options.record_timeline = flags.trace.has_value();

  const SweepShare share = plan_share(flags, spec, options, problems, chosen, entry);
  if (flags.dry_run) {
    std::unique_ptr<Device> device = entry.open(DeviceOptions{.threads = spec.threads, .index = flags.device_index});
    const DryRun dry_run{.backend = spec.backend, .nominal_flop_rate = entry.nominal_flop_rate, .options = options,
                         .rounds = flags.rounds, .already_done = share.already_done()};
    return print_dry_run(std::cout, flags.format, dry_run, *device, share.to_run, chosen.list);
  }

  // Read before this process loads the machine (the device, the ceilings).
  const EnvironmentSource host = host_environment_source();
  const HostEnvironment environment = read_host_environment(host);
  const std::optional<CpuTimes> cpu_times_start = read_cpu_times(host);
  std::unique_ptr<Device> device = entry.open(DeviceOptions{.threads = spec.threads, .index = flags.device_index});

  nlohmann::ordered_json meta = make_meta(argv);
  device->describe(meta);
  const std::optional<double> sgemm_ceiling_gflops = measure_sgemm_ceiling(flags, entry, meta);
  meta["sweep"] = to_json(share.sweep);
  meta["environment"] = to_json(environment);
  const std::vector<std::string> warnings = environment_warnings(environment);
  meta["warnings"] = warnings;
  if (share.earlier) meta["resumed_from"] = earlier_runs(share.earlier->meta);
  describe_plugins(meta, plugins);

  // From here a signal stops the sweep in order: the rows kept and finished are written.
  const StopOnSignal stop;
  Destination destination(flags.out, flags.format, share.earlier.has_value());
  std::unique_ptr<Reporter> reporter = exports.beside(make_reporter(
      flags.format, destination.stream(), destination.terminal(), table_width_for(flags.wide, destination.terminal())));
  reporter->begin(meta);
  RowWriter rows(*reporter);
  keep_earlier_rows(share, rows);
  destination.publish();
  print_warnings(warnings);

  SweepRun run(flags, spec, entry, *device, options, share.to_run, chosen, rows, destination, stop, sgemm_ceiling_gflops);
  run.run_rounds();
  run.finish();
  record_end_environment(*reporter, host, cpu_times_start);
  reporter->finish();
  destination.commit();
  exports.commit();
  return run.conclude(exports.describe());
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
  optional_string("--seq,-n", flags->sweep.seq, "Sequence length: N = N_k, list or range (default 1024)");
  optional_string("--seq-q", flags->sweep.seq_q, "Query rows N alone");
  optional_string("--seq-k", flags->sweep.seq_k,
                  "Key/value rows N_k (default N): cross-attention, a prefix cache");
  optional_string("--heads", flags->sweep.heads, "Heads H (default 8)");
  optional_string("--kv-heads", flags->sweep.kv_heads,
                  "Key/value heads G, dividing H (default H; 1 = MQA, else GQA)");
  sub->add_flag_function("--expand-kv", [flags](int64_t) { flags->sweep.expand_kv = "both"; },
                         "Run each G < H configuration also with K and V repeated to H heads (naive GQA), beside "
                         "the native one");
  optional_string("--dropout", flags->sweep.dropout,
                  "Dropout probability p on the attention weights, list (default 0); Philox 4x32-10 masks");
  optional_string("--head-dim,-d", flags->sweep.head_dim, "Head dim d, 1..256 (default 64)");
  optional_string("--batch,-b", flags->sweep.batch, "Batch B (default 1)");
  optional_string("--tokens", flags->sweep.tokens,
                  "Tokens T = B*N per configuration instead of --batch: B = T / N (e.g. --tokens 16384, as the GPU "
                  "results use); a T that N does not divide is an error");
  optional_string("--layers,-l", flags->sweep.layers, "Layers L of the chained stack (default 1)");
  sub->add_flag_function("--causal", [flags](int64_t) { flags->sweep.causal = "true"; },
                         "Apply the causal mask, bottom-right aligned: row i sees keys j <= i + N_k - N (a row that "
                         "sees none gives 0)");
  optional_string("--mask", flags->sweep.causal, "Causal mask per configuration: true, false or both");
  optional_string("--variant,--variants", flags->sweep.variants,
                  variant_names() + ": list or all (default all); each runs its default implementation");
  optional_string("--impl", flags->sweep.implementations,
                  "Implementations by name instead, e.g. v2,v2.split (`flashbench info` lists them)");
  sub->add_option("--plugin", flags->plugins,
                  "Load a plugin (a shared library built against flashbench/plugin.h, docs/plugins.md): its "
                  "implementations run by --impl NAME beside the built-in ones; repeatable, and FLASHBENCH_PLUGINS "
                  "(colon-separated) adds more")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  optional_string("--dtype", flags->sweep.dtype,
                  "Storage dtype: fp32 (default), bf16, fp16; on the CPU 16-bit storage with fp32 arithmetic");
  optional_string("--backend,--device", flags->sweep.backend, registry().device_names() + " (default cpu)");
  sub->add_option_function<int>("--threads", [flags](int value) {
    if (value < 1) throw UsageError(fmt::format("--threads must be at least 1 (got {})", value));
    flags->sweep.threads = value;
  }, "OpenMP threads (default: all cores; a count past the hardware threads is held to them, with a warning)");
  add_isa_option(sub);
  sub->add_option_function<int>("--warmup", [flags](int v) { flags->sweep.warmup = v; }, "Untimed runs first (default 1)");
  sub->add_option_function<double>("--warmup-time", [flags](double v) { flags->sweep.warmup_ms = v; },
                                   "... and at least this many ms of them");
  sub->add_option_function<int>("--min-samples", [flags](int v) { flags->sweep.min_samples = v; }, "At least this many timed samples (>= 5)");
  sub->add_option_function<int>("--max-samples", [flags](int v) { flags->sweep.max_samples = v; }, "At most this many");
  sub->add_option_function<double>("--max-noise", [flags](double v) { flags->sweep.max_noise = v; },
                                   "Stop once the median's relative noise is below this (default 0.02)");
  sub->add_option_function<double>("--max-time", [flags](double v) { flags->sweep.max_time_s = v; },
                                   "Or once an implementation's samples took this many seconds (default 10), but "
                                   "never before --min-samples: a floor of 5 passes each. A configuration takes "
                                   "longer: its check, set-up and warm-up come on top (--time-budget bounds the "
                                   "whole run)");
  sub->add_option_function<double>("--time-budget", [flags](double v) {
    if (!(v > 0 && std::isfinite(v))) throw UsageError(fmt::format("--time-budget must be a positive number of seconds (got {})", v));
    flags->time_budget_s = v;
  }, "Seconds the whole run may take: each configuration gets a share by its modelled time, past which "
     "its samples stop at --min-samples, and past the budget at one (said under the row); once it is spent, "
     "the configurations left are not run (said, and listed in the file's meta.not_run)");
  sub->add_option_function<double>("--throttle-threshold", [flags](double v) { flags->sweep.throttle_threshold = v; },
                                   "GPU: a sample whose SM clock is below this fraction of the maximum ran throttled "
                                   "(left out of the median where enough others remain; default 0.95)");
  sub->add_option("--format,-f", flags->format, std::string("Output format: ") + std::string(kReportFormats))
      ->capture_default_str();
  optional_string("--out,-o", flags->out, "Write the report to this file (atomically)");
  sub->add_flag("--wide", flags->wide,
                "Every column of the table; without it the table keeps to the terminal's width (else COLUMNS, "
                "else 100) and leaves out the columns the legend names");
  optional_string("--mem-limit", flags->mem_limit,
                  "Memory budget, e.g. 8GiB (default: what the device has free: MemAvailable, the GPU's free memory)");
  add_seed_option(sub, flags->seed, "Seed of the random inputs");
  sub->add_option_function<double>("--input-scale", [flags](double value) {
    if (!(value > 0 && std::isfinite(value))) throw UsageError(fmt::format("--input-scale must be a positive number (got {})", value));
    flags->input_scale = value;
  }, "Multiply the random inputs Q, K, V by this (default 1): the logits grow as its square, to probe fp16's range");
  sub->add_flag("--no-check", flags->no_check, "Skip comparing outputs and gradients with the float64 reference");
  sub->add_option_function<double>("--check-budget", [flags](double value) {
    if (!(value >= 0 && std::isfinite(value)))
      throw UsageError(fmt::format("--check-budget must be a finite number of GFLOP, 0 or more (got {})", value));
    flags->check_budget_gflop = value;
  }, "Most work the whole float64 reference of layer 0 may do per configuration [GFLOP] (default 250); beyond "
     "it the check compares sampled rows of O, dQ, dK and dV (up to 20x this), or says `not checked`");
  sub->add_flag("--cold", flags->cold, "Flush the caches before every pass (CPU: the last-level cache; CUDA: the L2)");
  CLI::Option* peak = sub->add_flag("--peak", flags->measure_peak,
                                    "Measure this machine's fp32 FMA and sgemm ceilings first (about a second) and "
                                    "show each rate as % of the sgemm ceiling (CPU)");
  CLI::Option* peak_file = sub->add_option_function<std::string>(
      "--peak-file", [flags](const std::string& value) { flags->peak_file = value; },
      "... or take the ceilings from a file written by `flashbench info --peak --format json`");
  peak->excludes(peak_file);
  optional_string("--shard", flags->shard,
                  "Run one share of the sweep: I/N (0 <= I < N), or auto / auto/N from the job array's index "
                  "(SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX); configurations are dealt by modelled time");
  sub->add_flag("--resume", flags->resume,
                "Keep the configurations --out already holds (of this sweep and shard) and run the rest: for a "
                "requeued or interrupted run (json or jsonl)");
  sub->add_option_function<int>("--device-index", [flags](int value) {
    if (value < 0) throw UsageError(fmt::format("--device-index must be 0 or more (got {})", value));
    flags->device_index = value;
  }, "Which GPU, counted among those CUDA_VISIBLE_DEVICES shows (default 0); rows record it");
  sub->add_option_function<int>("--rounds", [flags](int value) {
    if (value < 1) throw UsageError(fmt::format("--rounds must be at least 1 (got {})", value));
    flags->rounds = value;
  }, "Time the whole sweep this many times over, round after round, and keep each round's median: compare "
     "judges runs on those from 4 rounds a side (9 recommended; default 1)");
  optional_string("--trace", flags->trace,
                  "Write each row's memory timeline into this directory (created if missing) as a Chrome/Perfetto "
                  "trace (.trace.json) and a PyTorch memory_viz snapshot (.snapshot.pickle), named by backend, implementation and shape, e.g. cpu-v2-B1-H8-N4096-d64-L1-fp32 (docs/trace.md)");
  sub->add_flag("--dry-run", flags->dry_run,
                "Print each configuration, each implementation's modelled peak, which would be skipped and why, and "
                "the time it will take here, learned from a probe of a few seconds; write nothing (--format table "
                "or json)");
  optional_string("--export-json", flags->exports.json, "Also write the rows as JSON to this file (atomically)");
  optional_string("--export-csv", flags->exports.csv, "Also write the rows as CSV to this file (atomically)");
  optional_string("--export-md", flags->exports.md, "Also write the rows as Markdown to this file (atomically)");
  sub->add_flag("--progress", flags->progress,
                "Show progress (implementation, % of the modelled work, ETA) on stderr even when it is not a "
                "terminal (on a terminal it is always shown)");
  sub->add_flag("--profile", flags->profile,
                "For Nsight Systems / Nsight Compute: one warm-up and one sample per implementation, and on CUDA "
                "NVTX ranges named '<impl> <pass>' and '<impl> layer <i> forward|backward'");
  group_options(sub, {
      {"What to run", {"--config", "--seq", "--seq-q", "--seq-k", "--heads", "--kv-heads", "--expand-kv", "--dropout",
                       "--head-dim", "--batch", "--tokens", "--layers", "--causal", "--mask", "--dtype"}},
      {"Which implementations, where", {"--variant", "--impl", "--plugin", "--backend", "--device-index", "--threads",
                                        "--isa"}},
      {"Timing", {"--warmup", "--warmup-time", "--min-samples", "--max-samples", "--max-noise", "--max-time",
                  "--time-budget", "--rounds", "--throttle-threshold", "--cold", "--peak", "--peak-file", "--profile"}},
      {"Checks and inputs", {"--no-check", "--check-budget", "--seed", "--input-scale", "--mem-limit"}},
      {"Output", {"--format", "--out", "--wide", "--export-json", "--export-csv", "--export-md", "--trace",
                  "--progress", "--dry-run"}},
      {"Sweeps across machines", {"--shard", "--resume"}},
  });
  set_action(sub, [flags](const std::vector<std::string>& argv) { return run_sweep(*flags, argv); });
}

}  // namespace flashbench::cli
