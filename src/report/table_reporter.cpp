// The default reporter: one aligned block per problem, human units, the fastest variant marked
// (bold green and a '*') only on a terminal, so piped output stays plain text.
#include <ostream>

#include <fmt/format.h>

#include "flashbench/summary.hpp"
#include "reporters.hpp"

namespace flashbench::report_detail {

namespace {

constexpr std::string_view kBestColour = "\033[1;32m";
constexpr std::string_view kWarningColour = "\033[33m";
constexpr std::string_view kResetColour = "\033[0m";
constexpr std::string_view kColumnGap = "  ";

class TableReporter final : public GroupingReporter {
 public:
  TableReporter(std::ostream& out, bool terminal) : out_(out), terminal_(terminal) {}

  void begin(const nlohmann::ordered_json& meta) override { out_ << describe_meta(meta) << "\n"; }

 protected:
  void write_group(const std::vector<Row>& rows) override {
    GroupTable table = tabulate_group(rows);
    if (terminal_ && table.best_row >= 0) table.cells[size_t(table.best_row)][0] += " *";

    std::vector<size_t> widths(table.headers.size());
    for (size_t c = 0; c < widths.size(); ++c) {
      widths[c] = table.headers[c].size();
      for (const auto& cells : table.cells) widths[c] = std::max(widths[c], display_width(cells[c]));
    }
    out_ << "\n" << table.title << "\n";
    write_line(table.headers, widths, table.right_aligned);
    out_ << "\n";
    for (size_t r = 0; r < table.cells.size(); ++r) {
      const bool best = terminal_ && int(r) == table.best_row;
      if (best) out_ << kBestColour;
      write_line(table.cells[r], widths, table.right_aligned);
      if (best) out_ << kResetColour;
      out_ << "\n";
    }
    for (const std::string& note : table.notes) {
      if (terminal_) out_ << kWarningColour;
      out_ << "  warning: " << note;
      if (terminal_) out_ << kResetColour;
      out_ << "\n";
    }
    out_.flush();
  }

  // After a sweep over N: exponents, crossover, bwd/fwd against seed 002's rule (docs/articles.md).
  void write_end(const std::vector<Row>& all_rows) override {
    const SweepSummary summary = summarize_sweep(all_rows);
    if (summary.has_scaling()) out_ << "\n" << summary.table();
    out_.flush();
  }

 private:
  // Cells are ASCII (units included), so bytes equal terminal columns.
  static size_t display_width(const std::string& text) { return text.size(); }

  void write_line(const std::vector<std::string>& cells, const std::vector<size_t>& widths,
                  const std::vector<bool>& right_aligned) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line += kColumnGap;
      const bool last = c + 1 == cells.size();
      if (right_aligned[c]) line += fmt::format("{:>{}}", cells[c], widths[c]);
      else if (last) line += cells[c];  // no trailing blanks
      else line += fmt::format("{:<{}}", cells[c], widths[c]);
    }
    out_ << line;
  }

  std::ostream& out_;
  bool terminal_;
};

}  // namespace

std::unique_ptr<Reporter> make_table_reporter(std::ostream& out, bool terminal) {
  return std::make_unique<TableReporter>(out, terminal);
}

}  // namespace flashbench::report_detail
