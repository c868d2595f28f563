// JSON: the whole document {schema_version, meta, rows} written once, at finish, with the sweep's
// "summary" (scaling exponents, crossover) when some variant ran at two N or more.
#include <ostream>
#include <vector>

#include "flashbench/report/json.hpp"
#include "flashbench/report/reporter.hpp"
#include "flashbench/report/summary.hpp"
#include "reporters.hpp"

namespace flashbench::report_detail {

namespace {

class JsonReporter final : public Reporter {
 public:
  explicit JsonReporter(std::ostream& out) : out_(out) {}

  void begin(const nlohmann::ordered_json& meta) override {
    document_["schema_version"] = kSchemaVersion;
    document_["meta"] = meta;
    document_["rows"] = nlohmann::ordered_json::array();
  }
  void add(const Row& row) override {
    document_["rows"].push_back(row_to_json(row));
    rows_.push_back(row);
  }
  void mark_incomplete(const nlohmann::ordered_json& not_run) override { not_run_ = not_run; }
  void set_meta_at_end(const std::string& pointer, const nlohmann::ordered_json& value) override {
    document_["meta"][nlohmann::ordered_json::json_pointer(pointer)] = value;
  }
  void finish() override {
    // Whether every configuration of the sweep ran; an interrupted run lists the rest.
    document_["meta"]["complete"] = not_run_.empty();
    if (!not_run_.empty()) document_["meta"]["not_run"] = not_run_;
    const SweepSummary summary = summarize_sweep(rows_);
    if (summary.has_scaling()) document_["summary"] = summary.to_json();
    out_ << document_.dump(2) << "\n";
    out_.flush();
  }

 private:
  std::ostream& out_;
  nlohmann::ordered_json document_;
  nlohmann::ordered_json not_run_;
  std::vector<Row> rows_;
};

}  // namespace

std::unique_ptr<Reporter> make_json_reporter(std::ostream& out) { return std::make_unique<JsonReporter>(out); }

}  // namespace flashbench::report_detail
