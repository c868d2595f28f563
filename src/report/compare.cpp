// Matching rows of two runs (or of one run against its `standard` rows), judging each time
// difference with a Mann-Whitney U test over rounds or samples and the recorded load, and telling
// apart runs that were not made alike.
#include "flashbench/report/compare.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/json_integer.hpp"
#include "flashbench/core/statistics.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/report/json.hpp"
#include "flashbench/report/results_file.hpp"
#include "reporters.hpp"

namespace flashbench {

namespace {

using json = nlohmann::json;

bool timed(const Row& row) { return row.status == Status::ok && row.fwd.median_ms > 0 && row.bwd.median_ms > 0; }

// stddev / mean of the values (n - 1 in the denominator); 0 for fewer than 2.
double relative_spread(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
  double squares = 0;
  for (double x : values) squares += (x - mean) * (x - mean);
  return mean > 0 ? std::sqrt(squares / double(values.size() - 1)) / mean : 0;
}

// A string at `path` of the meta ("host/hostname"), or empty when it is not there.
std::string meta_text(const json& meta, const json::json_pointer& path) {
  if (!meta.is_object() || !meta.contains(path)) return {};
  const json& value = meta.at(path);
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// What a build is made of, beside its revision: type, compiler, flags, native, CUDA. The revision
// is what a before/after comparison is for, so it is not a difference.
std::string build_of(const json& meta) {
  if (!meta.is_object() || !meta.contains("build")) return {};
  const json& build = meta.at("build");
  return fmt::format("{} {} [{}] native={} cuda={}", meta_text(build, json::json_pointer("/type")),
                     meta_text(build, json::json_pointer("/compiler")), meta_text(build, json::json_pointer("/flags")),
                     meta_text(build, json::json_pointer("/native")), meta_text(build, json::json_pointer("/cuda")));
}

// The device a row ran on: the GPU's name, or the CPU's model from its file's meta.
std::string device_of(const Row& row, const json& meta) {
  return row.device.empty() ? meta_text(meta, json::json_pointer("/host/cpu")) : row.device;
}

// An unknown side (an empty string: a file that did not say) differs from nothing.
void note_difference(std::vector<Difference>& differences, std::string what, std::string a, std::string b) {
  if (a.empty() || b.empty() || a == b) return;
  differences.push_back({std::move(what), std::move(a), std::move(b)});
}

RowComparison compare_pair(const Row& a, const Row& b, const json& meta_a, const json& meta_b, const HostLoad& load_a,
                           const HostLoad& load_b, const CompareOptions& options) {
  RowComparison pair;
  pair.a = a;
  pair.b = b;
  note_difference(pair.differences, "device", device_of(a, meta_a), device_of(b, meta_b));
  if (a.threads > 0 && b.threads > 0) note_difference(pair.differences, "threads", std::to_string(a.threads), std::to_string(b.threads));
  note_difference(pair.differences, "dtype", std::string(to_string(a.problem.dtype)), std::string(to_string(b.problem.dtype)));
  // Samples under a held-down GPU clock, where either side counted any (they are left out of the
  // medians compared where enough others remain).
  const auto throttled = [](const Row& row) {
    if (!row.bwd.throttled_samples) return std::string("unknown");
    return fmt::format("{} of {}", *row.bwd.throttled_samples, row.bwd.count());
  };
  if (a.bwd.throttled_samples.value_or(0) > 0 || b.bwd.throttled_samples.value_or(0) > 0)
    note_difference(pair.differences, "throttled bwd samples", throttled(a), throttled(b));
  pair.timed = timed(a) && timed(b);
  if (a.measured.peak_bytes > 0) pair.peak_ratio = double(b.measured.peak_bytes) / double(a.measured.peak_bytes);
  if (!pair.timed) return pair;
  const double bound_a = load_a.slowdown_bound(a.threads), bound_b = load_b.slowdown_bound(b.threads);
  pair.fwd = compare_phase(a.fwd, b.fwd, options, bound_a, bound_b);
  pair.bwd = compare_phase(a.bwd, b.bwd, options, bound_a, bound_b);
  for (Verdict verdict : {Verdict::slower, Verdict::faster, Verdict::unsure})
    if (pair.fwd.verdict == verdict || pair.bwd.verdict == verdict) {
      pair.verdict = verdict;
      break;
    }
  return pair;
}

std::string short_row(const Row& row) {
  return fmt::format("{} {} {}", row.backend, row.implementation(), row.problem.describe());
}

std::string p_text(const std::optional<double>& p) {
  if (!p) return "n/a";
  return *p < 0.001 ? "<0.001" : fmt::format("{:.3f}", *p);
}

// The overall verdict, with the phases' own when they disagree: "SLOWER (fwd FASTER, bwd SLOWER)".
std::string verdict_text(const RowComparison& pair) {
  std::string text(to_string(pair.verdict));
  if (pair.fwd.verdict != pair.bwd.verdict)
    text += fmt::format(" (fwd {}, bwd {})", to_string(pair.fwd.verdict), to_string(pair.bwd.verdict));
  return text;
}

std::string differences_text(const std::vector<Difference>& differences) {
  std::string text;
  for (const Difference& d : differences) text += fmt::format("{}{} {} vs {}", text.empty() ? "" : ", ", d.what, d.a, d.b);
  return text;
}

nlohmann::ordered_json phase_json(const PhaseComparison& phase) {
  nlohmann::ordered_json j;
  j["basis"] = std::string(to_string(phase.basis));
  j["count_a"] = phase.count_a;
  j["count_b"] = phase.count_b;
  j["median_a_ms"] = phase.median_a_ms;
  j["median_b_ms"] = phase.median_b_ms;
  j["ratio"] = phase.ratio;
  j["p_value"] = json_or_null(phase.p_value);
  j["round_noise"] = phase.round_noise;
  j["rounds"] = phase.rounds;
  j["load_bound"] = phase.load_bound;
  j["verdict"] = std::string(to_string(phase.verdict));
  return j;
}

nlohmann::ordered_json differences_json(const std::vector<Difference>& differences) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const Difference& d : differences) j.push_back({{"what", d.what}, {"a", d.a}, {"b", d.b}});
  return j;
}

nlohmann::ordered_json load_json(const HostLoad& load) {
  return {{"load_start_1m", json_or_null(load.start)}, {"load_end_1m", json_or_null(load.end)},
          {"other_cpu_load", json_or_null(load.other_cpu)}, {"cpus", json_or_null(load.cpus)}};
}

// Who a row is, without its measurements.
nlohmann::ordered_json row_identity(const Row& row) {
  const nlohmann::ordered_json full = row_to_json(row);
  nlohmann::ordered_json j;
  for (const char* key : {"backend", "variant", "impl", "problem", "status", "reason"}) j[key] = full[key];
  return j;
}

std::string load_text(const HostLoad& load) {
  if (!load.start && !load.end) return "not recorded";
  auto value = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("?"); };
  return fmt::format("{} before, {} after on {} CPUs", value(load.start), value(load.end),
                     load.cpus ? std::to_string(*load.cpus) : std::string("?"));
}

// The cells of the comparison table: a header, then a line per pair.
std::vector<std::vector<std::string>> table_cells(const Comparison& comparison) {
  std::vector<std::vector<std::string>> lines = {{"backend", "variant", "problem", "fwd A", "fwd B", "fwd B/A", "p",
                                                  "bwd A", "bwd B", "bwd B/A", "p", "peak B/A", "verdict"}};
  for (const RowComparison& pair : comparison.pairs) {
    std::vector<std::string> line = {pair.b.backend, pair.b.implementation(), pair.b.problem.describe()};
    if (pair.timed) {
      for (const PhaseComparison* phase : {&pair.fwd, &pair.bwd}) {
        line.push_back(format_duration_ms(phase->median_a_ms));
        line.push_back(format_duration_ms(phase->median_b_ms));
        line.push_back(fmt::format("{:.2f}", phase->ratio));
        line.push_back(p_text(phase->p_value));
      }
    } else {
      for (int i = 0; i < 8; ++i) line.emplace_back("-");
    }
    line.push_back(pair.peak_ratio > 0 ? fmt::format("{:.2f}", pair.peak_ratio) : "-");
    std::string verdict = pair.timed ? verdict_text(pair)
                                     : fmt::format("{} -> {}", to_string(pair.a.status), to_string(pair.b.status));
    if (!pair.differences.empty()) verdict += " [" + differences_text(pair.differences) + "]";
    line.push_back(std::move(verdict));
    lines.push_back(std::move(line));
  }
  return lines;
}

const std::vector<bool> kRightAligned = {false, false, false, true, true, true, true, true, true, true, true, true, false};

// The lines under the table: geometric means, unmatched rows, what the runs differ in, the loads,
// how the verdicts were reached.
std::vector<std::string> notes(const Comparison& comparison) {
  std::vector<std::string> lines;
  for (const GeometricMean& mean : comparison.geometric_means())
    lines.push_back(fmt::format("geometric mean B/A of {}: fwd {:.3f}, bwd {:.3f} over {}", mean.impl,
                                mean.fwd_ratio, mean.bwd_ratio, counted(int64_t(mean.rows), "row")));
  for (const Row& row : comparison.only_a) lines.push_back(fmt::format("only in {}: {}", comparison.a_name, short_row(row)));
  for (const Row& row : comparison.only_b) lines.push_back(fmt::format("only in {}: {}", comparison.b_name, short_row(row)));
  const std::vector<Difference> differences = comparison.differences();
  if (!differences.empty()) lines.push_back("the runs differ (--allow-mismatch): " + differences_text(differences));
  if (comparison.load_a.start || comparison.load_b.start) {
    if (comparison.a_name == comparison.b_name || comparison.load_a.start == comparison.load_b.start)
      lines.push_back(fmt::format("load average (1 min): {}", load_text(comparison.load_b)));
    else
      lines.push_back(fmt::format("load average (1 min): A {}; B {}", load_text(comparison.load_a), load_text(comparison.load_b)));
  }
  size_t by_rounds = 0, by_samples_of_rounds = 0, by_samples = 0;
  for (const RowComparison& pair : comparison.pairs)
    if (pair.timed) {
      if (pair.fwd.basis == PhaseComparison::Basis::rounds) ++by_rounds;
      else if (pair.fwd.rounds >= 2) ++by_samples_of_rounds;
      else ++by_samples;
    }
  lines.push_back(fmt::format(
      "SLOWER/FASTER: medians differ by more than {:.0f}% (or the rounds' spread, if larger) and the Mann-Whitney U "
      "test gives p < {}; UNSURE: the load on the slower run's machine, beyond the other's, could explain it",
      100 * comparison.options.threshold, comparison.options.alpha));
  if (by_rounds > 0)
    lines.push_back(fmt::format("{} judged on the medians of their rounds (run --rounds)", counted(int64_t(by_rounds), "row")));
  if (by_samples_of_rounds > 0)
    lines.push_back(fmt::format("{} judged on the samples of 2 or 3 rounds, the bar their spread where larger "
                                "(from {} rounds a side the test runs over the rounds' medians)",
                                counted(int64_t(by_samples_of_rounds), "row"), kMinTestRounds));
  if (by_samples > 0)
    lines.push_back(fmt::format("{} judged on the samples of one round, blind to variation between runs "
                                "(run --rounds 9 on both sides to see it)",
                                counted(int64_t(by_samples), "row")));
  return lines;
}

}  // namespace

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::same: return "SAME";
    case Verdict::faster: return "FASTER";
    case Verdict::slower: return "SLOWER";
    case Verdict::unsure: return "UNSURE";
  }
  return "?";
}

std::string_view to_string(PhaseComparison::Basis basis) {
  return basis == PhaseComparison::Basis::rounds ? "rounds" : "samples";
}

double HostLoad::slowdown_bound(int threads) const {
  if (!cpus || *cpus < 1 || (!other_cpu && !start && !end)) return 1;
  const double own = std::max(1, threads);
  const double other = other_cpu ? std::max(0.0, *other_cpu) : std::max({0.0, start.value_or(0), end.value_or(0) - own});
  return std::max(1.0, (other + own) / double(*cpus));
}

HostLoad host_load(const json& meta) {
  HostLoad load;
  if (!meta.is_object() || !meta.contains("environment") || !meta.at("environment").is_object()) return load;
  const json& environment = meta.at("environment");
  auto one_minute = [&](const char* key) -> std::optional<double> {
    if (!environment.contains(key) || !environment.at(key).is_object()) return std::nullopt;
    const json& average = environment.at(key);
    if (!average.contains("1m") || !average.at("1m").is_number()) return std::nullopt;
    return average.at("1m").get<double>();
  };
  load.start = one_minute("load_average_start");
  load.end = one_minute("load_average_end");
  if (environment.contains("other_cpu_load") && environment.at("other_cpu_load").is_number())
    load.other_cpu = environment.at("other_cpu_load").get<double>();
  // Another program's number: read only when it is an int, as the load bound is optional.
  if (environment.contains("logical_cpus")) load.cpus = json_integer_if<int>(environment.at("logical_cpus"));
  return load;
}

PhaseComparison compare_phase(const TimingSummary& a, const TimingSummary& b, const CompareOptions& options,
                              double load_bound_a, double load_bound_b) {
  PhaseComparison phase;
  const bool rounds = a.round_medians_ms.size() >= kMinTestRounds && b.round_medians_ms.size() >= kMinTestRounds;
  if (rounds) {
    phase.basis = PhaseComparison::Basis::rounds;
    phase.count_a = a.round_medians_ms.size();
    phase.count_b = b.round_medians_ms.size();
    phase.median_a_ms = median_of(a.round_medians_ms);
    phase.median_b_ms = median_of(b.round_medians_ms);
    phase.p_value = mann_whitney_u(a.round_medians_ms, b.round_medians_ms).p_value;
    phase.round_noise = std::max(relative_spread(a.round_medians_ms), relative_spread(b.round_medians_ms));
  } else {
    // The samples each median is made of: throttled ones left out where the summary left them out.
    const std::vector<double> samples_a = a.summarized_samples(), samples_b = b.summarized_samples();
    phase.count_a = samples_a.size();
    phase.count_b = samples_b.size();
    phase.median_a_ms = a.median_ms;
    phase.median_b_ms = b.median_ms;
    if (samples_a.size() >= kMinTestSamples && samples_b.size() >= kMinTestSamples)
      phase.p_value = mann_whitney_u(samples_a, samples_b).p_value;
    // Two or three rounds a side (runs merged with `merge --rounds`, say): too few for a test over
    // their medians, but their spread is what drift between runs did, so the bar rises to it.
    if (a.round_medians_ms.size() >= 2 && b.round_medians_ms.size() >= 2)
      phase.round_noise = std::max(relative_spread(a.round_medians_ms), relative_spread(b.round_medians_ms));
  }
  phase.rounds = std::max<size_t>(1, std::min(a.round_medians_ms.size(), b.round_medians_ms.size()));
  phase.ratio = phase.median_a_ms > 0 ? phase.median_b_ms / phase.median_a_ms : 0;
  const double bar = std::max(options.threshold, phase.round_noise);
  const bool moved = std::abs(phase.ratio - 1.0) > bar;
  const bool significant = !phase.p_value || *phase.p_value < options.alpha;
  if (!moved || !significant) return phase;
  const bool slower = phase.ratio > 1;
  // Load that slowed both sides alike explains none of the difference between them.
  phase.load_bound = std::max(1.0, slower ? load_bound_b / load_bound_a : load_bound_a / load_bound_b);
  const double change = slower ? phase.ratio : 1 / phase.ratio;  // > 1 + bar
  if (change <= phase.load_bound * (1 + bar)) phase.verdict = Verdict::unsure;
  else phase.verdict = slower ? Verdict::slower : Verdict::faster;
  return phase;
}

Comparison compare_runs(const ResultsFile& a, const ResultsFile& b, const CompareOptions& options) {
  Comparison comparison;
  comparison.options = options;
  comparison.load_a = host_load(a.meta);
  comparison.load_b = host_load(b.meta);
  note_difference(comparison.run_differences, "host", meta_text(a.meta, json::json_pointer("/host/hostname")),
                  meta_text(b.meta, json::json_pointer("/host/hostname")));
  note_difference(comparison.run_differences, "build", build_of(a.meta), build_of(b.meta));
  std::vector<bool> matched_a(a.rows.size(), false), matched_b(b.rows.size(), false);
  std::vector<std::pair<size_t, size_t>> matches;
  // Exact matches first; then what is left, by everything but the dtype.
  for (bool ignore_dtype : {false, true})
    for (size_t i = 0; i < a.rows.size(); ++i) {
      if (matched_a[i]) continue;
      const Row& row = a.rows[i];
      for (size_t k = 0; k < b.rows.size(); ++k) {
        Problem problem = b.rows[k].problem;
        if (ignore_dtype) problem.dtype = row.problem.dtype;
        if (matched_b[k] || b.rows[k].backend != row.backend || b.rows[k].implementation() != row.implementation() ||
            !same_problem(problem, row.problem))
          continue;
        matched_a[i] = matched_b[k] = true;
        matches.emplace_back(i, k);
        break;
      }
    }
  std::sort(matches.begin(), matches.end());  // in the order of a's rows
  for (const auto& [i, k] : matches)
    comparison.pairs.push_back(
        compare_pair(a.rows[i], b.rows[k], a.meta, b.meta, comparison.load_a, comparison.load_b, options));
  for (size_t i = 0; i < a.rows.size(); ++i)
    if (!matched_a[i]) comparison.only_a.push_back(a.rows[i]);
  for (size_t k = 0; k < b.rows.size(); ++k)
    if (!matched_b[k]) comparison.only_b.push_back(b.rows[k]);
  return comparison;
}

Comparison compare_runs(const std::vector<Row>& a, const std::vector<Row>& b, const CompareOptions& options) {
  ResultsFile file_a, file_b;
  file_a.rows = a;
  file_b.rows = b;
  return compare_runs(file_a, file_b, options);
}

Comparison compare_to_baseline(const ResultsFile& file, const std::string& baseline, const CompareOptions& options) {
  Comparison comparison;
  comparison.options = options;
  comparison.a_name = baseline;
  comparison.load_a = comparison.load_b = host_load(file.meta);
  const std::vector<Row>& rows = file.rows;
  bool baseline_seen = false;
  for (const Row& row : rows) baseline_seen |= row.implementation() == baseline;
  if (!baseline_seen) throw UsageError(fmt::format("--baseline: no row of '{}' in the file", baseline));
  for (const Row& row : rows) {
    if (row.implementation() == baseline) continue;
    const auto reference = std::find_if(rows.begin(), rows.end(), [&](const Row& r) {
      return r.implementation() == baseline && r.backend == row.backend && same_problem(r.problem, row.problem);
    });
    if (reference == rows.end()) comparison.only_b.push_back(row);
    else
      comparison.pairs.push_back(
          compare_pair(*reference, row, file.meta, file.meta, comparison.load_a, comparison.load_b, options));
  }
  return comparison;
}

Comparison compare_to_baseline(const std::vector<Row>& rows, const std::string& baseline, const CompareOptions& options) {
  ResultsFile file;
  file.rows = rows;
  return compare_to_baseline(file, baseline, options);
}

bool Comparison::any_slower() const {
  return std::any_of(pairs.begin(), pairs.end(), [](const RowComparison& p) { return p.verdict == Verdict::slower; });
}

std::vector<Difference> Comparison::differences() const {
  std::vector<Difference> all = run_differences;
  for (const RowComparison& pair : pairs)
    for (const Difference& d : pair.differences)
      if (std::find(all.begin(), all.end(), d) == all.end()) all.push_back(d);
  return all;
}

std::vector<GeometricMean> Comparison::geometric_means() const {
  std::vector<GeometricMean> means;
  std::map<std::string, std::pair<double, double>> log_sums;  // impl -> sum of log fwd, log bwd ratios
  for (const RowComparison& pair : pairs) {
    if (!pair.timed || pair.fwd.ratio <= 0 || pair.bwd.ratio <= 0) continue;
    const std::string impl = pair.b.implementation();
    auto mean = std::find_if(means.begin(), means.end(), [&](const GeometricMean& m) { return m.impl == impl; });
    if (mean == means.end()) mean = means.insert(means.end(), GeometricMean{impl});
    mean->rows += 1;
    log_sums[impl].first += std::log(pair.fwd.ratio);
    log_sums[impl].second += std::log(pair.bwd.ratio);
  }
  for (GeometricMean& mean : means) {
    mean.fwd_ratio = std::exp(log_sums[mean.impl].first / double(mean.rows));
    mean.bwd_ratio = std::exp(log_sums[mean.impl].second / double(mean.rows));
  }
  return means;
}

std::string Comparison::table(size_t width) const {
  const std::vector<std::vector<std::string>> lines = table_cells(*this);
  std::vector<size_t> widths(kRightAligned.size(), 0);
  for (const auto& line : lines)
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  // Within a width, columns give way in this order: the p-values, A's medians, B's medians, the
  // backend, the peak ratio; the ratios and the verdict stay.
  constexpr std::array<size_t, 8> kDropOrder = {6, 10, 3, 7, 4, 8, 0, 11};
  std::vector<bool> keep(widths.size(), true);
  const auto total = [&] {
    size_t sum = 0;
    for (size_t c = 0; c < widths.size(); ++c)
      if (keep[c]) sum += widths[c] + (sum > 0 ? 2 : 0);
    return sum;
  };
  for (size_t c : kDropOrder)
    if (width > 0 && total() > width) keep[c] = false;
  std::string text = report_detail::wrap_text(fmt::format("A = {}, B = {}", a_name, b_name), width, 2) + "\n";
  for (const auto& line : lines) {
    std::string out;
    for (size_t c = 0; c < line.size(); ++c) {
      if (!keep[c]) continue;
      if (!out.empty()) out += "  ";
      if (kRightAligned[c]) out += fmt::format("{:>{}}", line[c], widths[c]);
      else if (c + 1 == line.size()) out += line[c];
      else out += fmt::format("{:<{}}", line[c], widths[c]);
    }
    text += out + "\n";
  }
  for (const std::string& note : notes(*this)) text += report_detail::wrap_text(note, width, 2) + "\n";
  if (std::find(keep.begin(), keep.end(), false) != keep.end())
    text += report_detail::wrap_text("(--wide adds the medians of A and B, the p-values and the other columns)", width, 2) +
            "\n";
  return text;
}

std::string Comparison::markdown() const {
  const std::vector<std::vector<std::string>> lines = table_cells(*this);
  std::string text = fmt::format("A = `{}`, B = `{}`\n\n", a_name, b_name);
  for (size_t l = 0; l < lines.size(); ++l) {
    std::string out = "|";
    for (const std::string& cell : lines[l]) out += " " + cell + " |";
    text += out + "\n";
    if (l == 0) {
      std::string rule = "|";
      for (bool right : kRightAligned) rule += right ? " ---: |" : " --- |";
      text += rule + "\n";
    }
  }
  text += "\n";
  for (const std::string& note : notes(*this)) text += "- " + note + "\n";
  return text;
}

nlohmann::ordered_json Comparison::to_json() const {
  nlohmann::ordered_json j;
  j["a"] = a_name;
  j["b"] = b_name;
  j["threshold"] = options.threshold;
  j["alpha"] = options.alpha;
  j["pairs"] = nlohmann::ordered_json::array();
  for (const RowComparison& pair : pairs) {
    nlohmann::ordered_json e;
    e["backend"] = pair.b.backend;
    e["variant_a"] = std::string(to_string(pair.a.variant));
    e["variant_b"] = std::string(to_string(pair.b.variant));
    e["impl_a"] = pair.a.implementation();
    e["impl_b"] = pair.b.implementation();
    e["problem"] = row_to_json(pair.b)["problem"];
    e["status_a"] = std::string(to_string(pair.a.status));
    e["status_b"] = std::string(to_string(pair.b.status));
    if (pair.timed) {
      e["fwd"] = phase_json(pair.fwd);
      e["bwd"] = phase_json(pair.bwd);
    }
    e["peak_ratio"] = pair.peak_ratio > 0 ? nlohmann::ordered_json(pair.peak_ratio) : nlohmann::ordered_json(nullptr);
    e["verdict"] = pair.timed ? nlohmann::ordered_json(std::string(to_string(pair.verdict))) : nlohmann::ordered_json(nullptr);
    e["differences"] = differences_json(pair.differences);
    j["pairs"].push_back(std::move(e));
  }
  j["geometric_means"] = nlohmann::ordered_json::array();
  for (const GeometricMean& mean : geometric_means())
    j["geometric_means"].push_back({{"impl", mean.impl}, {"fwd_ratio", mean.fwd_ratio}, {"bwd_ratio", mean.bwd_ratio},
                                    {"rows", mean.rows}});
  j["differences"] = differences_json(differences());
  j["load_a"] = load_json(load_a);
  j["load_b"] = load_json(load_b);
  j["only_a"] = nlohmann::ordered_json::array();
  for (const Row& row : only_a) j["only_a"].push_back(row_identity(row));
  j["only_b"] = nlohmann::ordered_json::array();
  for (const Row& row : only_b) j["only_b"].push_back(row_identity(row));
  return j;
}

}  // namespace flashbench
