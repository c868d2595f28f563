// A sweep's summary: scaling exponents, the v2/standard crossover, bwd/fwd against seed 002's rule
// (docs/articles.md); its JSON form is the "summary" of docs/json.md.
#include "flashbench/report/summary.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <iterator>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "flashbench/core/statistics.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/report/json.hpp"
#include "reporters.hpp"

namespace flashbench {

namespace {

// Series key: backend and every axis but N; batch kBatchFollowsSeq where the batch changes with N.
using ShapeKey = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, bool, int, std::string>;
constexpr int64_t kBatchFollowsSeq = -1;
ShapeKey shape_key(const Row& row, int64_t batch) {
  const Problem& p = row.problem;
  return {row.backend, batch, p.heads, p.head_dim, p.layers, p.causal, static_cast<int>(p.dtype), p.workload()};
}

// Sweeps at a fixed token count (B·N constant, as GPU sweeps and peers run) change B with N. Rows
// that differ only in B are one series when no variant ran the same N at two batches; otherwise
// each batch is its own series.
std::map<ShapeKey, bool> batches_follow_seq(const std::vector<Row>& rows) {
  std::map<ShapeKey, std::map<std::pair<std::string, int64_t>, std::vector<int64_t>>> batches;
  for (const Row& row : rows)
    batches[shape_key(row, kBatchFollowsSeq)][{row.implementation(), row.problem.seq}].push_back(row.problem.batch);
  std::map<ShapeKey, bool> follows;
  for (const auto& [key, by_point] : batches) {
    std::vector<int64_t> seen;
    bool one_batch_per_point = true;
    for (const auto& [point, list] : by_point) {
      one_batch_per_point = one_batch_per_point && list.size() == 1;
      seen.insert(seen.end(), list.begin(), list.end());
    }
    std::sort(seen.begin(), seen.end());
    follows[key] = one_batch_per_point && std::unique(seen.begin(), seen.end()) - seen.begin() > 1;
  }
  return follows;
}

// "B=1 H=8 d=64 L=1 fp32", or "B*N=16384 H=16 ..." / "B varies H=16 ..." where the batch follows N.
std::string shape_label(const std::vector<const Row*>& rows, bool batch_follows_seq) {
  const Problem& p = rows.front()->problem;
  if (!batch_follows_seq) return describe_shape(p);
  std::vector<int64_t> tokens;
  for (const Row* row : rows) tokens.push_back(row->problem.batch * row->problem.seq);
  const bool constant = std::all_of(tokens.begin(), tokens.end(), [&](int64_t t) { return t == tokens.front(); });
  Problem without_batch = p;
  without_batch.batch = 1;
  const std::string rest = describe_shape(without_batch).substr(4);  // drop "B=1 "
  return constant ? fmt::format("B*N={} {}", tokens.front(), rest) : "B varies " + rest;
}

bool timed(const Row& row) { return row.status == Status::ok && row.fwd.median_ms > 0 && row.bwd.median_ms > 0; }

// Fits log(value) against log(N) over the points where value > 0; none with fewer than two N.
std::optional<LineFit> log_log_fit(const std::vector<const Row*>& rows, double (*value)(const Row&)) {
  std::vector<double> x, y;
  for (const Row* row : rows) {
    const double v = value(*row);
    if (v <= 0) continue;
    x.push_back(std::log(double(row->problem.seq)));
    y.push_back(std::log(v));
  }
  if (x.size() < 2 || x.front() == x.back()) return std::nullopt;
  return fit_line(x, y);
}

std::string exponent_text(const std::optional<LineFit>& fit) { return fit ? fmt::format("{:.2f}", fit->slope) : "-"; }

nlohmann::ordered_json fit_json(const std::optional<LineFit>& fit) {
  if (!fit) return nullptr;
  nlohmann::ordered_json j;
  j["exponent"] = fit->slope;
  j["r2"] = fit->r2;
  return j;
}

nlohmann::ordered_json shape_json(const Problem& p, bool batch_follows_seq, const std::string& label) {
  nlohmann::ordered_json j;
  j["label"] = label;
  j["batch"] = batch_follows_seq ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.batch);
  j["heads"] = p.heads;
  j["head_dim"] = p.head_dim;
  j["layers"] = p.layers;
  j["causal"] = p.causal;
  j["dtype"] = std::string(to_string(p.dtype));
  return j;
}

// Columns two spaces apart, right-aligned where `right_aligned` says so.
std::string aligned(const std::vector<std::vector<std::string>>& lines, const std::vector<bool>& right_aligned) {
  std::vector<size_t> widths;
  for (const auto& line : lines) {
    widths.resize(std::max(widths.size(), line.size()));
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  }
  std::string text;
  for (const auto& line : lines) {
    std::string out;
    for (size_t c = 0; c < line.size(); ++c) {
      if (c > 0) out += "  ";
      const bool last = c + 1 == line.size();
      if (c < right_aligned.size() && right_aligned[c]) out += fmt::format("{:>{}}", line[c], widths[c]);
      else if (last) out += line[c];
      else out += fmt::format("{:<{}}", line[c], widths[c]);
    }
    text += out + "\n";
  }
  return text;
}

std::string rule_text(const ScalingSeries& s) {
  return bwd_fwd_rule(s.variant, s.bwd_over_fwd_median, s.bwd_over_fwd_max, s.bwd_over_fwd_max_seq);
}

std::string seq_range(const std::vector<int64_t>& seq) {
  if (seq.empty()) return "-";
  return seq.size() == 1 ? fmt::format("{}", seq.front()) : fmt::format("{}..{}", seq.front(), seq.back());
}

}  // namespace

std::string bwd_fwd_verdict(double bwd_over_fwd) {
  if (bwd_over_fwd > kBwdFwdTooHigh) return "too high (> 3x): recompute overhead";
  if (bwd_over_fwd > kBwdFwdNormalHigh) return "above normal (2-3x)";
  if (bwd_over_fwd >= kBwdFwdNormalLow) return "normal (1.5-2x)";
  return "below 1.5x";
}

std::string bwd_fwd_rule(Variant variant, double median, double max, int64_t max_seq) {
  // Seed 002's rule is about the cost of recomputing in backward; standard recomputes nothing.
  if (variant == Variant::standard) return "reference (recomputes nothing)";
  std::string text = bwd_fwd_verdict(median);
  if (median <= kBwdFwdTooHigh && max > kBwdFwdTooHigh) text += fmt::format("; {:.2f}x at N={}", max, max_seq);
  return text;
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n != y.size() || n < 2) throw std::invalid_argument("fit_line needs two points or more");
  double mean_x = 0, mean_y = 0;
  for (size_t i = 0; i < n; ++i) {
    mean_x += x[i];
    mean_y += y[i];
  }
  mean_x /= double(n);
  mean_y /= double(n);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mean_x) * (x[i] - mean_x);
    sxy += (x[i] - mean_x) * (y[i] - mean_y);
    syy += (y[i] - mean_y) * (y[i] - mean_y);
  }
  if (sxx == 0) throw std::invalid_argument("fit_line needs two distinct x values");
  LineFit fit;
  fit.slope = sxy / sxx;
  fit.intercept = mean_y - fit.slope * mean_x;
  fit.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  return fit;
}

std::string describe_shape(const Problem& p) {
  const std::string extras = p.workload();
  return fmt::format("B={} H={} d={} L={}{}{}{} {}", p.batch, p.heads, p.head_dim, p.layers, p.causal ? " causal" : "",
                     extras.empty() ? "" : " ", extras, to_string(p.dtype));
}

namespace {

// A row's fwd + bwd time per sample (the two phases of one sample ran back to back) as a summary
// compare's rule can judge; where the phases' sample counts differ, their medians' sum alone.
TimingSummary total_time(const Row& row) {
  std::vector<double> totals;
  if (row.fwd.samples_ms.size() == row.bwd.samples_ms.size())
    for (size_t i = 0; i < row.fwd.samples_ms.size(); ++i) totals.push_back(row.fwd.samples_ms[i] + row.bwd.samples_ms[i]);
  if (totals.empty()) totals.push_back(row.fwd.median_ms + row.bwd.median_ms);
  return summarize(std::move(totals), 1.0);
}

// The rows of a series whose time lies beyond kDisturbedFactor of the fit over its other rows (at
// least three others at distinct N, some below and some above the row's). One at a time, the
// worst first, each taken out before the next is judged: a disturbed row would otherwise pull the
// fits its neighbours are judged by.
void find_disturbed(std::vector<const Row*> series_rows, const std::function<size_t(const Row*)>& row_index,
                    std::vector<DisturbedRow>& disturbed) {
  const auto total_ms = [](const Row* row) { return row->fwd.median_ms + row->bwd.median_ms; };
  while (series_rows.size() >= 4) {
    size_t worst = series_rows.size();
    double worst_distance = 0, worst_predicted = 0;
    for (size_t i = 0; i < series_rows.size(); ++i) {
      std::vector<double> x, y;
      for (size_t j = 0; j < series_rows.size(); ++j)
        if (series_rows[j]->problem.seq != series_rows[i]->problem.seq) {
          x.push_back(std::log(double(series_rows[j]->problem.seq)));
          y.push_back(std::log(total_ms(series_rows[j])));
        }
      std::vector<double> distinct = x;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      // Judged between other N only: a series may bend at its ends (a fixed cost at small N, a cache
      // falling off at large N), which a straight line through the rest would call disturbed.
      const double at = std::log(double(series_rows[i]->problem.seq));
      if (distinct.size() < 3 || at <= distinct.front() || at >= distinct.back()) continue;
      const LineFit fit = fit_line(x, y);
      const double predicted = std::exp(fit.intercept + fit.slope * std::log(double(series_rows[i]->problem.seq)));
      const double distance = std::abs(std::log(total_ms(series_rows[i]) / predicted));
      if (distance > worst_distance) {
        worst = i;
        worst_distance = distance;
        worst_predicted = predicted;
      }
    }
    if (worst == series_rows.size() || worst_distance <= std::log(kDisturbedFactor)) return;
    const Row& row = *series_rows[worst];
    disturbed.push_back({row.backend, row.implementation(), row.problem, total_ms(&row), worst_predicted, row_index(&row)});
    series_rows.erase(series_rows.begin() + std::ptrdiff_t(worst));
  }
}

}  // namespace

SweepSummary summarize_sweep(const std::vector<Row>& rows) {
  SweepSummary summary;
  // Series in order of first appearance, so the summary follows the sweep.
  std::vector<std::pair<ShapeKey, std::string>> order;
  std::map<std::pair<ShapeKey, std::string>, std::vector<const Row*>> groups;
  std::vector<Row> timed_rows;
  std::copy_if(rows.begin(), rows.end(), std::back_inserter(timed_rows), timed);
  const std::map<ShapeKey, bool> follows = batches_follow_seq(timed_rows);
  const auto key_of = [&](const Row& row) {
    const bool merged = follows.at(shape_key(row, kBatchFollowsSeq));
    return shape_key(row, merged ? kBatchFollowsSeq : row.problem.batch);
  };
  for (const Row& row : rows) {
    if (!timed(row)) continue;
    const auto key = std::make_pair(key_of(row), row.implementation());
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&row);
  }
  for (const auto& key : order) {
    std::vector<const Row*>& series_rows = groups[key];
    std::stable_sort(series_rows.begin(), series_rows.end(),
                     [](const Row* a, const Row* b) { return a->problem.seq < b->problem.seq; });
    ScalingSeries series;
    series.backend = series_rows.front()->backend;
    series.variant = series_rows.front()->variant;
    series.impl = key.second;
    series.shape = series_rows.front()->problem;
    series.batch_follows_seq = std::get<1>(key.first) == kBatchFollowsSeq;
    series.shape_label = shape_label(series_rows, series.batch_follows_seq);
    std::vector<double> ratios;
    bool all_modelled = true;
    for (const Row* row : series_rows) {
      series.seq.push_back(row->problem.seq);
      ratios.push_back(row->bwd.median_ms / row->fwd.median_ms);
      if (ratios.back() > series.bwd_over_fwd_max) {
        series.bwd_over_fwd_max = ratios.back();
        series.bwd_over_fwd_max_seq = row->problem.seq;
      }
      all_modelled = all_modelled && row->model && row->model->peak_bytes > 0;
    }
    series.time = log_log_fit(series_rows, [](const Row& r) { return r.fwd.median_ms + r.bwd.median_ms; });
    find_disturbed(series_rows, [&](const Row* row) { return size_t(row - rows.data()); }, summary.disturbed);
    series.fwd = log_log_fit(series_rows, [](const Row& r) { return r.fwd.median_ms; });
    series.bwd = log_log_fit(series_rows, [](const Row& r) { return r.bwd.median_ms; });
    series.peak = log_log_fit(series_rows, [](const Row& r) { return double(r.measured.peak_bytes); });
    if (all_modelled)
      series.model_peak = log_log_fit(series_rows, [](const Row& r) { return double(r.model->peak_bytes); });
    series.bwd_over_fwd_median = median_of(ratios);
    // The larger half of the N (rows sorted by N; a repeated N counts as often as it was run).
    if (series_rows.size() >= 4) {
      const std::vector<const Row*> large(series_rows.begin() + std::ptrdiff_t(series_rows.size() / 2), series_rows.end());
      series.time_large_n = log_log_fit(large, [](const Row& r) { return r.fwd.median_ms + r.bwd.median_ms; });
      series.peak_large_n = log_log_fit(large, [](const Row& r) { return double(r.measured.peak_bytes); });
    }
    summary.series.push_back(std::move(series));
  }

  // Crossovers: the default standard against the default v2 on the same backend and shape, at the N
  // both ran.
  std::vector<ShapeKey> shapes;
  for (const auto& key : order)
    if (std::find(shapes.begin(), shapes.end(), key.first) == shapes.end()) shapes.push_back(key.first);
  for (const ShapeKey& shape : shapes) {
    const auto standard = groups.find({shape, std::string("standard")});
    const auto v2 = groups.find({shape, std::string("v2")});
    if (standard == groups.end() || v2 == groups.end()) continue;
    Crossover crossover;
    crossover.backend = standard->second.front()->backend;
    crossover.shape = standard->second.front()->problem;
    crossover.batch_follows_seq = std::get<1>(shape) == kBatchFollowsSeq;
    crossover.shape_label = shape_label(standard->second, crossover.batch_follows_seq);
    for (const Row* s : standard->second)
      for (const Row* f : v2->second)
        if (f->problem.seq == s->problem.seq) {
          crossover.seq.push_back(s->problem.seq);
          crossover.ratio.push_back((f->fwd.median_ms + f->bwd.median_ms) / (s->fwd.median_ms + s->bwd.median_ms));
          crossover.verdict.push_back(compare_phase(total_time(*s), total_time(*f), CompareOptions{}).verdict);
          break;
        }
    if (crossover.seq.empty()) continue;
    // Walk down from the largest N while v2 stays faster by compare's rule (a ratio below 1 within
    // the noise is no difference, and says nothing about where the lines cross).
    size_t first_faster = crossover.seq.size();
    while (first_faster > 0 && crossover.verdict[first_faster - 1] == Verdict::faster) --first_faster;
    if (first_faster < crossover.seq.size()) {
      crossover.faster_from = crossover.seq[first_faster];
      if (first_faster > 0) {
        const double x0 = std::log(double(crossover.seq[first_faster - 1]));
        const double x1 = std::log(double(crossover.seq[first_faster]));
        const double y0 = std::log(crossover.ratio[first_faster - 1]);
        const double y1 = std::log(crossover.ratio[first_faster]);
        crossover.interpolated_seq = std::exp(x0 + (0 - y0) * (x1 - x0) / (y1 - y0));
      }
    }
    summary.crossovers.push_back(std::move(crossover));
  }
  return summary;
}

bool SweepSummary::has_scaling() const {
  return std::any_of(series.begin(), series.end(), [](const ScalingSeries& s) { return s.seq.size() >= 2; });
}

std::string SweepSummary::table(size_t width) const {
  std::string text = report_detail::wrap_text(
                         "Scaling with N: exponent k of a least-squares fit of log(y) = k log(N) + c", width, 2) +
                     "\n";
  std::vector<std::vector<std::string>> lines = {
      {"backend", "variant", "shape", "N", "time k", "large N", "fwd k", "bwd k", "peak k", "large N", "model k",
       "bwd/fwd", "rule of thumb: 1.5-2x normal"}};
  for (const ScalingSeries& s : series) {
    lines.push_back({s.backend, s.impl, s.shape_label, seq_range(s.seq),
                     exponent_text(s.time), exponent_text(s.time_large_n), exponent_text(s.fwd), exponent_text(s.bwd),
                     exponent_text(s.peak), exponent_text(s.peak_large_n), exponent_text(s.model_peak),
                     fmt::format("{:.2f}x", s.bwd_over_fwd_median), rule_text(s)});
  }
  std::vector<bool> right_aligned = {false, false, false, true, true, true, true, true, true, true, true, true, false};
  // Within a width, columns give way in this order (the two "large N" first, the rule last).
  constexpr std::array<size_t, 9> kDropOrder = {9, 5, 10, 6, 7, 0, 12, 11, 8};
  std::vector<bool> keep(right_aligned.size(), true);
  const auto total = [&] {
    size_t sum = 0;
    for (size_t c = 0; c < keep.size(); ++c) {
      if (!keep[c]) continue;
      size_t column = 0;
      for (const auto& line : lines) column = std::max(column, line[c].size());
      sum += column + (sum > 0 ? 2 : 0);
    }
    return sum;
  };
  for (size_t c : kDropOrder)
    if (width > 0 && total() > width) keep[c] = false;
  for (auto& line : lines) {
    std::vector<std::string> shown;
    for (size_t c = 0; c < keep.size(); ++c)
      if (keep[c]) shown.push_back(std::move(line[c]));
    line = std::move(shown);
  }
  std::vector<bool> shown_alignment;
  for (size_t c = 0; c < keep.size(); ++c)
    if (keep[c]) shown_alignment.push_back(right_aligned[c]);
  text += aligned(lines, shown_alignment);
  std::string footnote = keep[5] || keep[9] ? "large N: the same fit over the larger half of the N; " : "";
  if (keep[11]) footnote += "bwd/fwd: the median over N";
  if (!footnote.empty()) text += report_detail::wrap_text(footnote, width, 2) + "\n";
  if (std::find(keep.begin(), keep.end(), false) != keep.end())
    text += report_detail::wrap_text("(--wide adds the summary's other columns)", width, 2) + "\n";
  if (!crossovers.empty()) {
    text += "\n" + report_detail::wrap_text("v2 against standard (fwd + bwd time ratio, below 1 where v2 is faster, "
                                            "and compare's verdict on the samples: faster or slower only beyond "
                                            "5 % and the U test's p < 0.05, else same)",
                                            width, 2) + "\n";
    for (const Crossover& c : crossovers) {
      std::string ratios;
      for (size_t i = 0; i < c.seq.size(); ++i)
        ratios += fmt::format("{}N={} {:.2f} {}", i ? ", " : "", c.seq[i], c.ratio[i],
                              c.verdict.size() > i ? lowercase(to_string(c.verdict[i])) : "");
      const bool all_same = std::all_of(c.verdict.begin(), c.verdict.end(), [](Verdict v) { return v == Verdict::same; });
      std::string verdict;
      if (all_same) verdict = "no difference beyond the noise at any N";
      else if (!c.faster_from) verdict = "v2 not faster at the largest N";
      else if (c.faster_from == c.seq.front()) verdict = fmt::format("v2 faster at every N from {}", *c.faster_from);
      else if (c.interpolated_seq)
        verdict = fmt::format("v2 faster from N = {} (crossover ~{:.0f})", *c.faster_from, *c.interpolated_seq);
      else verdict = fmt::format("v2 faster from N = {}", *c.faster_from);
      text += report_detail::wrap_text(fmt::format("{}: {}: {}; {}", c.backend, c.shape_label, verdict, ratios), width, 2) +
              "\n";
    }
  }
  if (!disturbed.empty()) {
    text += "\n" + report_detail::wrap_text(fmt::format("Disturbed? Rows {:g}x or more off the time their series' other "
                                                         "N predict (a log-log fit without them): the machine may have "
                                                         "been busy, and ratios built on them are suspect; run them again",
                                                         kDisturbedFactor),
                                            width, 2) + "\n";
    for (const DisturbedRow& d : disturbed)
      text += report_detail::wrap_text(fmt::format("{} {} {}: {} fwd+bwd, {:.2f}x the {} predicted", d.backend, d.impl,
                                                   d.problem.describe(), format_duration_ms(d.measured_ms),
                                                   d.measured_ms / d.predicted_ms, format_duration_ms(d.predicted_ms)),
                                       width, 2) + "\n";
  }
  return text;
}

nlohmann::ordered_json SweepSummary::to_json() const {
  nlohmann::ordered_json j;
  j["scaling"] = nlohmann::ordered_json::array();
  for (const ScalingSeries& s : series) {
    nlohmann::ordered_json e;
    e["backend"] = s.backend;
    e["variant"] = std::string(to_string(s.variant));
    e["impl"] = s.impl;
    e["shape"] = shape_json(s.shape, s.batch_follows_seq, s.shape_label);
    e["seq"] = s.seq;
    e["time"] = fit_json(s.time);
    e["fwd"] = fit_json(s.fwd);
    e["bwd"] = fit_json(s.bwd);
    e["peak"] = fit_json(s.peak);
    e["model_peak"] = fit_json(s.model_peak);
    e["time_large_n"] = fit_json(s.time_large_n);
    e["peak_large_n"] = fit_json(s.peak_large_n);
    e["bwd_over_fwd"]["median"] = s.bwd_over_fwd_median;
    e["bwd_over_fwd"]["max"] = s.bwd_over_fwd_max;
    e["bwd_over_fwd"]["max_seq"] = s.bwd_over_fwd_max_seq;
    e["bwd_over_fwd"]["verdict"] = rule_text(s);
    j["scaling"].push_back(std::move(e));
  }
  j["crossovers"] = nlohmann::ordered_json::array();
  for (const Crossover& c : crossovers) {
    nlohmann::ordered_json e;
    e["backend"] = c.backend;
    e["shape"] = shape_json(c.shape, c.batch_follows_seq, c.shape_label);
    e["seq"] = c.seq;
    e["v2_over_standard"] = c.ratio;
    e["verdict"] = nlohmann::ordered_json::array();
    for (Verdict v : c.verdict) e["verdict"].push_back(lowercase(to_string(v)));
    e["faster_from"] = json_or_null(c.faster_from);
    e["interpolated_seq"] = json_or_null(c.interpolated_seq);
    j["crossovers"].push_back(std::move(e));
  }
  j["disturbed"] = nlohmann::ordered_json::array();
  for (const DisturbedRow& d : disturbed)
    j["disturbed"].push_back({{"backend", d.backend}, {"impl", d.impl}, {"problem", d.problem.describe()},
                              {"measured_ms", d.measured_ms}, {"predicted_ms", d.predicted_ms},
                              {"factor", d.measured_ms / d.predicted_ms}, {"row", d.row}});
  return j;
}

}  // namespace flashbench
