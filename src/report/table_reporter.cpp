// The default reporter: one aligned block per problem, human units, the fastest variant marked
// (bold green and a '*') only on a terminal, so piped output stays plain text. Given a width, a
// block keeps to it: the least needed columns give way first (--wide shows them all), a status's
// reason moves to a note below, and free text wraps. One legend line at the end explains the marks
// and warnings that were printed, and only those.
#include <algorithm>
#include <array>
#include <ostream>

#include <fmt/format.h>

#include "flashbench/report/reporter.hpp"
#include "flashbench/report/summary.hpp"
#include "reporters.hpp"

namespace flashbench::report_detail {

namespace {

constexpr std::string_view kBestColour = "\033[1;32m";
constexpr std::string_view kWarningColour = "\033[33m";
constexpr std::string_view kResetColour = "\033[0m";
constexpr std::string_view kColumnGap = "  ";

// The columns a narrow block leaves out, the first given up first; the rest (variant, fwd, bwd,
// peak, check, status) always show. Where the title promises rates as % of a ceiling (run --peak),
// the rates are the last to go (kDropOrderKeepingRates), and the promise goes with them.
constexpr std::array<std::string_view, 8> kDropOrder = {"bwd/fwd",  "peak-model", "model peak", "fwd rate",
                                                        "bwd rate", "peak/std",   "time/std",   "kept"};
constexpr std::array<std::string_view, 8> kDropOrderKeepingRates = {"bwd/fwd",  "peak-model", "model peak", "peak/std",
                                                                    "time/std", "kept",       "fwd rate",   "bwd rate"};
constexpr std::string_view kRatePromise = "; rate % of the ";  // tabulate_group's title, with a ceiling

// The width each column is fitted by: its widest cell of any block, as far as the cells' formats
// allow it to be known before the block is made ("0.0512 ms", "1.23 TFLOP/s 100%", "1023 KiB"), so
// that every block of a run, however its numbers fall, keeps the same columns.
size_t planned_width(std::string_view header) {
  if (header == "fwd" || header == "bwd") return 9;
  if (header == "fwd rate" || header == "bwd rate") return 17;
  if (header == "kept" || header == "peak" || header == "model peak") return 9;
  if (header == "bwd/fwd" || header == "time/std" || header == "peak/std") return 6;
  if (header == "peak-model") return 7;
  if (header == "check") return 12;
  if (header == "status") return 7;
  if (header == "variant") return 12;
  return 0;
}

// What a mark or a warning means, and what to do about it; the legend prints those that appeared.
enum class Mark { fastest, no_value, warned, check_failed, not_checked, skipped, oom, failed, noise, cold_start,
                  not_deterministic, hazard, throttled, count };
constexpr std::array<std::string_view, size_t(Mark::count)> kMeaning = {
    "* fastest fwd+bwd",
    "- no value",
    "ok ! ok, with the warnings listed under its block",
    "FAIL error above the tolerance (the run exits 1)",
    "not checked: the reference would cost more than --check-budget",
    "skipped: would not fit the memory (its model's peak is in the JSON) or not supported",
    "oom: an allocation failed",
    "failed: the kernel or runtime failed",
    "noise: the samples still spread more than --max-noise when --max-time ran out (quiet the machine, with no other "
    "load and the `performance` governor, or give it more --max-time, and compare runs made with --rounds 9)",
    "first sample: a cold start the warm-up did not absorb (raise --warmup)",
    "not deterministic: a second pass gave other bits (reductions in another order)",
    "fp16 overflow: logits beyond fp16's range (a smaller --input-scale keeps them in it)",
    "throttled: samples ran with the GPU's clock held down (power, heat, or below --throttle-threshold of its "
    "maximum); left out of the times where --min-samples others remain (timing.*.throttled_samples in the JSON)",
};

class TableReporter final : public GroupingReporter {
 public:
  TableReporter(std::ostream& out, bool terminal, int width)
      : out_(out), terminal_(terminal), width_(size_t(std::max(width, 0))) {}

  void begin(const nlohmann::ordered_json& meta) override { out_ << wrap_text(describe_meta(meta), width_, 2) << "\n"; }

 protected:
  void write_group(const std::vector<Row>& rows) override {
    GroupTable table = tabulate_group(rows);
    if (terminal_ && table.best_row >= 0) table.cells[size_t(table.best_row)][0] += " *";
    const std::vector<std::string> reasons = width_ > 0 ? move_reasons_out(table) : std::vector<std::string>{};

    std::vector<size_t> widths(table.headers.size()), planned(table.headers.size());
    for (size_t c = 0; c < widths.size(); ++c) {
      widths[c] = table.headers[c].size();
      for (const auto& cells : table.cells) widths[c] = std::max(widths[c], display_width(cells[c]));
      planned[c] = std::max(widths[c], planned_width(table.headers[c]));
    }
    const bool rates_promised = table.title.find(kRatePromise) != std::string::npos;
    const std::vector<size_t> shown = columns_that_fit(table.headers, planned, rates_promised);
    const auto is_shown = [&](std::string_view name) {
      const auto at = std::find(table.headers.begin(), table.headers.end(), name);
      return at != table.headers.end() && std::find(shown.begin(), shown.end(), size_t(at - table.headers.begin())) != shown.end();
    };
    if (rates_promised && !is_shown("fwd rate") && !is_shown("bwd rate"))
      table.title.erase(table.title.find(kRatePromise));  // no rate shown, none promised
    note_marks(rows, table, shown);

    out_ << "\n" << wrap_text(table.title, width_, 2) << "\n";
    write_line(table.headers, shown, widths, table.right_aligned);
    out_ << "\n";
    for (size_t r = 0; r < table.cells.size(); ++r) {
      const bool best = terminal_ && int(r) == table.best_row;
      if (best) out_ << kBestColour;
      write_line(table.cells[r], shown, widths, table.right_aligned);
      if (best) out_ << kResetColour;
      out_ << "\n";
    }
    for (const std::string& reason : reasons) out_ << wrap_text("  " + reason, width_, 4) << "\n";
    for (const std::string& note : table.notes) {
      if (terminal_) out_ << kWarningColour;
      out_ << wrap_text("  warning: " + note, width_, 4);
      if (terminal_) out_ << kResetColour;
      out_ << "\n";
    }
    out_.flush();
  }

  // The legend, then after a sweep over N: exponents, crossover, bwd/fwd against seed 002's rule
  // (docs/articles.md).
  void write_end(const std::vector<Row>& all_rows) override {
    std::string legend;
    for (size_t m = 0; m < seen_.size(); ++m)
      if (seen_[m]) legend += (legend.empty() ? "" : "; ") + std::string(kMeaning[m]);
    if (!hidden_.empty()) {
      std::string names;
      for (const std::string& name : hidden_) names += (names.empty() ? "" : ", ") + name;
      legend += (legend.empty() ? "" : "; ") + fmt::format("--wide adds the columns {}", names);
    }
    if (!legend.empty()) out_ << "\n" << wrap_text("legend: " + legend, width_, 2) << "\n";
    const SweepSummary summary = summarize_sweep(all_rows);
    if (summary.has_scaling()) out_ << "\n" << summary.table(width_);
    out_.flush();
  }

 private:
  // Cells are ASCII (units included), so bytes equal terminal columns.
  static size_t display_width(const std::string& text) { return text.size(); }

  // A status cell "oom: needs 2.00 GiB, limit 1.00 GiB" keeps "oom"; the reason goes under the block
  // ("v1: oom: needs 2.00 GiB, limit 1.00 GiB").
  static std::vector<std::string> move_reasons_out(GroupTable& table) {
    std::vector<std::string> reasons;
    const size_t status = table.headers.size() - 1;
    for (auto& cells : table.cells) {
      const size_t colon = cells[status].find(": ");
      if (colon == std::string::npos) continue;
      reasons.push_back(fmt::format("{}: {}", cells[0].substr(0, cells[0].find(' ')), cells[status]));
      cells[status].resize(colon);
    }
    return reasons;
  }

  // The columns to print, in their order: all of them, less those of kDropOrder (in its order) until
  // the block fits the width.
  std::vector<size_t> columns_that_fit(const std::vector<std::string>& headers, const std::vector<size_t>& widths,
                                       bool keep_rates) {
    std::vector<bool> keep(headers.size(), true);
    const auto total = [&] {
      size_t sum = 0, columns = 0;
      for (size_t c = 0; c < headers.size(); ++c)
        if (keep[c]) sum += widths[c], ++columns;
      return sum + (columns - 1) * kColumnGap.size();
    };
    for (std::string_view name : keep_rates ? kDropOrderKeepingRates : kDropOrder) {
      if (width_ == 0 || total() <= width_) break;
      const auto at = std::find(headers.begin(), headers.end(), name);
      if (at == headers.end()) continue;
      keep[size_t(at - headers.begin())] = false;
      if (std::find(hidden_.begin(), hidden_.end(), name) == hidden_.end()) hidden_.emplace_back(name);
    }
    std::vector<size_t> shown;
    for (size_t c = 0; c < headers.size(); ++c)
      if (keep[c]) shown.push_back(c);
    return shown;
  }

  void note_marks(const std::vector<Row>& rows, const GroupTable& table, const std::vector<size_t>& shown) {
    const auto saw = [&](Mark mark) { seen_[size_t(mark)] = true; };
    if (terminal_ && table.best_row >= 0) saw(Mark::fastest);
    const size_t check = size_t(std::find(table.headers.begin(), table.headers.end(), "check") - table.headers.begin());
    const size_t status = table.headers.size() - 1;
    for (const auto& cells : table.cells) {
      for (size_t c : shown)
        if (cells[c] == "-") saw(Mark::no_value);
      if (check < cells.size() && cells[check].rfind("FAIL", 0) == 0) saw(Mark::check_failed);
      if (check < cells.size() && cells[check] == "not checked") saw(Mark::not_checked);
      const std::string& state = cells[status];
      if (state == "ok !") saw(Mark::warned);
      if (state.rfind("skipped", 0) == 0) saw(Mark::skipped);
      if (state.rfind("oom", 0) == 0) saw(Mark::oom);
      if (state.rfind("failed", 0) == 0) saw(Mark::failed);
    }
    for (const Row& row : rows) {
      if (row.fwd.noisy || row.bwd.noisy) saw(Mark::noise);
      if (row.fwd.first_outlier || row.bwd.first_outlier) saw(Mark::cold_start);
      if (row.reproducibility && row.reproducibility->deterministic == false) saw(Mark::not_deterministic);
      if (!row.hazards.empty()) saw(Mark::hazard);
      if (row.fwd.throttled_samples.value_or(0) > 0 || row.bwd.throttled_samples.value_or(0) > 0) saw(Mark::throttled);
    }
  }

  void write_line(const std::vector<std::string>& cells, const std::vector<size_t>& shown,
                  const std::vector<size_t>& widths, const std::vector<bool>& right_aligned) {
    std::string line;
    for (size_t i = 0; i < shown.size(); ++i) {
      const size_t c = shown[i];
      if (i > 0) line += kColumnGap;
      const bool last = i + 1 == shown.size();
      if (right_aligned[c]) line += fmt::format("{:>{}}", cells[c], widths[c]);
      else if (last) line += cells[c];  // no trailing blanks
      else line += fmt::format("{:<{}}", cells[c], widths[c]);
    }
    out_ << line;
  }

  std::ostream& out_;
  bool terminal_;
  size_t width_;  // [columns]; 0: no limit (--wide)
  std::array<bool, size_t(Mark::count)> seen_{};
  std::vector<std::string> hidden_;  // columns left out of some block, in the order given up
};

}  // namespace

std::unique_ptr<Reporter> make_table_reporter(std::ostream& out, bool terminal, int width) {
  return std::make_unique<TableReporter>(out, terminal, width);
}

}  // namespace flashbench::report_detail
