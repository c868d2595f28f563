// CSV (RFC 4180): one header line, then one line per row in raw units (ms, bytes, TFLOP/s), for
// spreadsheets. Empty cells where a row has no value (an oom row's times, a row without a model).
#include <ostream>

#include <fmt/format.h>

#include "reporters.hpp"

#include "flashbench/report/reporter.hpp"

namespace flashbench::report_detail {

namespace {

std::string quoted(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string number(double value, bool present) { return present ? fmt::format("{}", value) : std::string(); }

class CsvReporter final : public Reporter {
 public:
  explicit CsvReporter(std::ostream& out) : out_(out) {}

  void begin(const nlohmann::ordered_json&) override {
    std::vector<std::string> header = {"backend", "variant", "impl", "batch", "heads", "kv_heads", "seq", "seq_k",
                                       "head_dim", "layers", "causal", "dropout", "expand_kv", "dtype", "status",
                                       "reason"};
    for (const char* phase : {"fwd", "bwd"})
      for (const char* stat : {"median_ms", "mean_ms", "stddev_ms", "min_ms", "max_ms", "count", "median_noise"})
        header.push_back(fmt::format("{}_{}", phase, stat));
    for (const char* column : {"fwd_tflops", "bwd_tflops", "peak_bytes", "peak_phase", "kept_bytes"})
      header.emplace_back(column);
    // The split at the peak: "at_peak_kept_bytes" is not the kept_bytes column (kept at the end of forward).
    for (Tag tag : kAllTags) header.push_back(fmt::format("at_peak_{}_bytes", to_string(tag)));
    for (const char* column : {"os_peak_bytes", "model_peak_bytes", "model_kept_bytes", "check_reference",
                               "max_rel_err", "tolerance", "check_passed", "naive_rel_err", "not_checked", "threads",
                               "device", "cold", "peak_gflops", "fwd_of_peak", "bwd_of_peak"})
      header.emplace_back(column);
    write(header);
  }

  void add(const Row& row) override {
    const Problem& p = row.problem;
    std::vector<std::string> cells = {row.backend,
                                      std::string(to_string(row.variant)),
                                      row.implementation(),
                                      fmt::format("{}", p.batch),
                                      fmt::format("{}", p.heads),
                                      fmt::format("{}", p.key_heads()),
                                      fmt::format("{}", p.seq),
                                      fmt::format("{}", p.key_seq()),
                                      fmt::format("{}", p.head_dim),
                                      fmt::format("{}", p.layers),
                                      p.causal ? "true" : "false",
                                      fmt::format("{:g}", p.dropout),
                                      p.repeats_kv() ? "true" : "false",
                                      std::string(to_string(p.dtype)),
                                      std::string(to_string(row.status)),
                                      row.reason};
    for (const TimingSummary* t : {&row.fwd, &row.bwd}) {
      const bool has = t->count() > 0;
      cells.push_back(number(t->median_ms, has));
      cells.push_back(number(t->mean_ms, has));
      cells.push_back(number(t->stddev_ms, has));
      cells.push_back(number(t->min_ms, has));
      cells.push_back(number(t->max_ms, has));
      cells.push_back(fmt::format("{}", t->count()));
      cells.push_back(number(t->median_noise, has));
    }
    cells.push_back(number(row.fwd_tflops(), row.fwd.median_ms > 0));
    cells.push_back(number(row.bwd_tflops(), row.bwd.median_ms > 0));
    cells.push_back(fmt::format("{}", row.measured.peak_bytes));
    cells.emplace_back(to_string(row.measured.peak_phase));
    cells.push_back(fmt::format("{}", row.measured.kept_bytes));
    for (Tag tag : kAllTags) cells.push_back(fmt::format("{}", row.measured.by_tag[tag]));
    cells.push_back(row.measured.os_peak_bytes ? fmt::format("{}", *row.measured.os_peak_bytes) : "");
    cells.push_back(row.model ? fmt::format("{}", row.model->peak_bytes) : "");
    cells.push_back(row.model ? fmt::format("{}", row.model->kept_bytes) : "");
    cells.push_back(row.check ? row.check->reference : "");
    cells.push_back(row.check ? fmt::format("{}", row.check->max_rel_err) : "");
    cells.push_back(row.check ? fmt::format("{}", row.check->tolerance) : "");
    cells.push_back(row.check ? (row.check->passed() ? "true" : "false") : "");
    cells.push_back(row.check && row.check->naive_rel_err ? fmt::format("{}", *row.check->naive_rel_err) : "");
    cells.push_back(row.not_checked);
    cells.push_back(fmt::format("{}", row.threads));
    cells.push_back(row.device);
    cells.push_back(row.cold ? "true" : "false");
    cells.push_back(row.peak_gflops ? fmt::format("{}", *row.peak_gflops) : "");
    cells.push_back(row.fwd_of_peak() ? fmt::format("{}", *row.fwd_of_peak()) : "");
    cells.push_back(row.bwd_of_peak() ? fmt::format("{}", *row.bwd_of_peak()) : "");
    write(cells);
  }

  void finish() override { out_.flush(); }

 private:
  void write(const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out_ << (i ? "," : "") << quoted(cells[i]);
    out_ << "\n";
    out_.flush();
  }

  std::ostream& out_;
};

}  // namespace

std::unique_ptr<Reporter> make_csv_reporter(std::ostream& out) { return std::make_unique<CsvReporter>(out); }

}  // namespace flashbench::report_detail
