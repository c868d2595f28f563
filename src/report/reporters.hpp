#pragma once
// Private to src/report: the reporter classes' factories and what the table and markdown reporters
// share (grouping rows by problem, the columns and their cells).
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "flashbench/report/reporter.hpp"

namespace flashbench::report_detail {

std::unique_ptr<Reporter> make_table_reporter(std::ostream& out, bool terminal, int width);
std::unique_ptr<Reporter> make_markdown_reporter(std::ostream& out);
std::unique_ptr<Reporter> make_json_reporter(std::ostream& out);
std::unique_ptr<Reporter> make_jsonl_reporter(std::ostream& out);
std::unique_ptr<Reporter> make_csv_reporter(std::ostream& out);

// `text` broken at spaces into lines of at most `width` columns (0: no limit), each line after the
// first indented by `indent`; a word longer than the width stays whole. No trailing newline.
std::string wrap_text(const std::string& text, size_t width, size_t indent);

// The rows of one backend on one problem, in human units, with speed and memory relative to the
// group's `standard` row. Rows of one problem arrive consecutively, so reporters buffer a group.
struct GroupTable {
  std::string title;                       // "cpu: B=1 H=8 N=4096 d=64 L=1 fp32, 4 threads"
  std::vector<std::string> headers;
  std::vector<bool> right_aligned;         // per column
  std::vector<std::vector<std::string>> cells;  // per row, per column
  int best_row = -1;                       // fastest ok row when two or more rows are ok
  std::vector<std::string> notes;          // "v2: bwd noise 3.1% above the 2.0% target ..."
};
GroupTable tabulate_group(const std::vector<Row>& rows);

// "flashbench 0.1.0 (abc123), <cpu>, 16 threads" from make_meta()'s object; keys may be missing.
std::string describe_meta(const nlohmann::ordered_json& meta);

// Buffers consecutive rows of one (backend, problem) and hands each complete group to write_group;
// at finish, hands over every row for the sweep summary.
class GroupingReporter : public Reporter {
 public:
  void add(const Row& row) override;
  void end_configuration() override;
  void finish() override;

 protected:
  virtual void write_group(const std::vector<Row>& rows) = 0;
  virtual void write_end(const std::vector<Row>& all_rows) = 0;

 private:
  void flush_group();
  std::vector<Row> group_;
  std::vector<Row> all_;
};

}  // namespace flashbench::report_detail
