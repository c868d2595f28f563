// JSON Lines: a first line {schema_version, meta}, then one row per line, each flushed as soon as
// its configuration finishes, so an interrupted sweep keeps everything it measured; a last line
// {"summary": ...} when the sweep has something to fit.
#include <ostream>
#include <vector>

#include "flashbench/report/json.hpp"
#include "flashbench/report/reporter.hpp"
#include "flashbench/report/summary.hpp"
#include "reporters.hpp"

namespace flashbench::report_detail {

namespace {

class JsonLinesReporter final : public Reporter {
 public:
  explicit JsonLinesReporter(std::ostream& out) : out_(out) {}

  void begin(const nlohmann::ordered_json& meta) override {
    nlohmann::ordered_json header;
    header["schema_version"] = kSchemaVersion;
    header["meta"] = meta;
    out_ << header.dump() << std::endl;
  }
  void add(const Row& row) override {
    out_ << row_to_json(row).dump() << std::endl;
    rows_.push_back(row);
  }
  void finish() override {
    const SweepSummary summary = summarize_sweep(rows_);
    if (summary.has_scaling()) {
      nlohmann::ordered_json line;
      line["summary"] = summary.to_json();
      out_ << line.dump() << std::endl;
    }
    out_.flush();
  }

 private:
  std::ostream& out_;
  std::vector<Row> rows_;
};

}  // namespace

std::unique_ptr<Reporter> make_jsonl_reporter(std::ostream& out) { return std::make_unique<JsonLinesReporter>(out); }

}  // namespace flashbench::report_detail
