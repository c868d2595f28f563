// JSON: the whole document {schema_version, meta, rows} written once, at finish.
#include <ostream>

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
  void add(const Row& row) override { document_["rows"].push_back(row_to_json(row)); }
  void finish() override {
    out_ << document_.dump(2) << "\n";
    out_.flush();
  }

 private:
  std::ostream& out_;
  nlohmann::ordered_json document_;
};

}  // namespace

std::unique_ptr<Reporter> make_json_reporter(std::ostream& out) { return std::make_unique<JsonReporter>(out); }

}  // namespace flashbench::report_detail
