// Markdown: one heading and one pipe table per problem, for pasting into issues and READMEs.
#include <ostream>

#include "flashbench/report/reporter.hpp"
#include "flashbench/report/summary.hpp"
#include "reporters.hpp"

namespace flashbench::report_detail {

namespace {

class MarkdownReporter final : public GroupingReporter {
 public:
  explicit MarkdownReporter(std::ostream& out) : out_(out) {}

  void begin(const nlohmann::ordered_json& meta) override { out_ << "_" << describe_meta(meta) << "_\n"; }

 protected:
  void write_group(const std::vector<Row>& rows) override {
    const GroupTable table = tabulate_group(rows);
    out_ << "\n### " << table.title << "\n\n";
    write_line(table.headers);
    std::string rule = "|";
    for (bool right : table.right_aligned) rule += right ? " ---: |" : " --- |";
    out_ << rule << "\n";
    for (const auto& cells : table.cells) write_line(cells);
    if (!table.notes.empty()) out_ << "\n";
    for (const std::string& note : table.notes) out_ << "- warning: " << note << "\n";
    out_.flush();
  }

  void write_end(const std::vector<Row>& all_rows) override {
    const SweepSummary summary = summarize_sweep(all_rows);
    if (summary.has_scaling()) out_ << "\n### Summary\n\n```\n" << summary.table() << "```\n";
    out_.flush();
  }

 private:
  void write_line(const std::vector<std::string>& cells) {
    out_ << "|";
    for (const std::string& cell : cells) {
      out_ << " ";
      for (char c : cell) {
        if (c == '|') out_ << '\\';  // a pipe inside a reason would end the cell
        out_ << c;
      }
      out_ << " |";
    }
    out_ << "\n";
  }

  std::ostream& out_;
};

}  // namespace

std::unique_ptr<Reporter> make_markdown_reporter(std::ostream& out) { return std::make_unique<MarkdownReporter>(out); }

}  // namespace flashbench::report_detail
