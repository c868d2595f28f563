// Matching rows of two runs (or of one run against its `standard` rows) and judging each time
// difference with a Mann-Whitney U test on the samples.
#include "flashbench/compare.hpp"

#include "flashbench/errors.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "flashbench/report.hpp"
#include "flashbench/statistics.hpp"

namespace flashbench {

namespace {


bool timed(const Row& row) { return row.status == Status::ok && row.fwd.median_ms > 0 && row.bwd.median_ms > 0; }

RowComparison compare_pair(const Row& a, const Row& b, const CompareOptions& options) {
  RowComparison pair;
  pair.a = a;
  pair.b = b;
  pair.timed = timed(a) && timed(b);
  if (a.measured.peak_bytes > 0) pair.peak_ratio = double(b.measured.peak_bytes) / double(a.measured.peak_bytes);
  if (!pair.timed) return pair;
  pair.fwd = compare_phase(a.fwd, b.fwd, options);
  pair.bwd = compare_phase(a.bwd, b.bwd, options);
  if (pair.fwd.verdict == Verdict::slower || pair.bwd.verdict == Verdict::slower) pair.verdict = Verdict::slower;
  else if (pair.fwd.verdict == Verdict::faster || pair.bwd.verdict == Verdict::faster) pair.verdict = Verdict::faster;
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

nlohmann::ordered_json phase_json(const PhaseComparison& phase) {
  nlohmann::ordered_json j;
  j["median_a_ms"] = phase.median_a_ms;
  j["median_b_ms"] = phase.median_b_ms;
  j["ratio"] = phase.ratio;
  j["p_value"] = phase.p_value ? nlohmann::ordered_json(*phase.p_value) : nlohmann::ordered_json(nullptr);
  j["verdict"] = std::string(to_string(phase.verdict));
  return j;
}

// Who a row is, without its measurements.
nlohmann::ordered_json row_identity(const Row& row) {
  const nlohmann::ordered_json full = row_to_json(row);
  nlohmann::ordered_json j;
  for (const char* key : {"backend", "variant", "impl", "problem", "status", "reason"}) j[key] = full[key];
  return j;
}

}  // namespace

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::same: return "SAME";
    case Verdict::faster: return "FASTER";
    case Verdict::slower: return "SLOWER";
  }
  return "?";
}

PhaseComparison compare_phase(const TimingSummary& a, const TimingSummary& b, const CompareOptions& options) {
  PhaseComparison phase;
  phase.median_a_ms = a.median_ms;
  phase.median_b_ms = b.median_ms;
  phase.ratio = a.median_ms > 0 ? b.median_ms / a.median_ms : 0;
  if (a.samples_ms.size() >= kMinTestSamples && b.samples_ms.size() >= kMinTestSamples)
    phase.p_value = mann_whitney_u(a.samples_ms, b.samples_ms).p_value;
  const bool moved = std::abs(phase.ratio - 1.0) > options.threshold;
  const bool significant = !phase.p_value || *phase.p_value < options.alpha;
  if (moved && significant) phase.verdict = phase.ratio > 1 ? Verdict::slower : Verdict::faster;
  return phase;
}

Comparison compare_runs(const std::vector<Row>& a, const std::vector<Row>& b, const CompareOptions& options) {
  Comparison comparison;
  std::vector<bool> matched(b.size(), false);
  for (const Row& row : a) {
    bool found = false;
    for (size_t i = 0; i < b.size(); ++i) {
      if (matched[i] || b[i].backend != row.backend || b[i].implementation() != row.implementation() ||
          !same_problem(b[i].problem, row.problem))
        continue;
      matched[i] = found = true;
      comparison.pairs.push_back(compare_pair(row, b[i], options));
      break;
    }
    if (!found) comparison.only_a.push_back(row);
  }
  for (size_t i = 0; i < b.size(); ++i)
    if (!matched[i]) comparison.only_b.push_back(b[i]);
  return comparison;
}

Comparison compare_to_baseline(const std::vector<Row>& rows, const std::string& baseline, const CompareOptions& options) {
  Comparison comparison;
  comparison.a_name = baseline;
  bool baseline_seen = false;
  for (const Row& row : rows) baseline_seen |= row.implementation() == baseline;
  if (!baseline_seen) throw UsageError(fmt::format("--baseline: no row of '{}' in the file", baseline));
  for (const Row& row : rows) {
    if (row.implementation() == baseline) continue;
    const auto reference = std::find_if(rows.begin(), rows.end(), [&](const Row& r) {
      return r.implementation() == baseline && r.backend == row.backend && same_problem(r.problem, row.problem);
    });
    if (reference == rows.end()) comparison.only_b.push_back(row);
    else comparison.pairs.push_back(compare_pair(*reference, row, options));
  }
  return comparison;
}

bool Comparison::any_slower() const {
  return std::any_of(pairs.begin(), pairs.end(), [](const RowComparison& p) { return p.verdict == Verdict::slower; });
}

std::string Comparison::table() const {
  std::vector<std::vector<std::string>> lines = {{"backend", "variant", "problem", "fwd A", "fwd B", "B/A", "p",
                                                  "bwd A", "bwd B", "B/A", "p", "peak B/A", "verdict"}};
  const std::vector<bool> right = {false, false, false, true, true, true, true, true, true, true, true, true, false};
  for (const RowComparison& pair : pairs) {
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
    line.push_back(pair.timed ? verdict_text(pair)
                              : fmt::format("{} -> {}", to_string(pair.a.status), to_string(pair.b.status)));
    lines.push_back(std::move(line));
  }
  std::vector<size_t> widths(right.size(), 0);
  for (const auto& line : lines)
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  std::string text = fmt::format("A = {}, B = {}\n", a_name, b_name);
  for (const auto& line : lines) {
    std::string out;
    for (size_t c = 0; c < line.size(); ++c) {
      if (c > 0) out += "  ";
      if (right[c]) out += fmt::format("{:>{}}", line[c], widths[c]);
      else if (c + 1 == line.size()) out += line[c];
      else out += fmt::format("{:<{}}", line[c], widths[c]);
    }
    text += out + "\n";
  }
  for (const Row& row : only_a) text += fmt::format("only in {}: {}\n", a_name, short_row(row));
  for (const Row& row : only_b) text += fmt::format("only in {}: {}\n", b_name, short_row(row));
  return text;
}

nlohmann::ordered_json Comparison::to_json() const {
  nlohmann::ordered_json j;
  j["a"] = a_name;
  j["b"] = b_name;
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
    j["pairs"].push_back(std::move(e));
  }
  j["only_a"] = nlohmann::ordered_json::array();
  for (const Row& row : only_a) j["only_a"].push_back(row_identity(row));
  j["only_b"] = nlohmann::ordered_json::array();
  for (const Row& row : only_b) j["only_b"].push_back(row_identity(row));
  return j;
}

}  // namespace flashbench
