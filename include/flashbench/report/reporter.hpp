#pragma once
// Turning rows into output: the reporters (table, json, jsonl, csv, md) behind one small interface,
// one per file in src/report/; the JSON form of a row they write is json.hpp.
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/core/result.hpp"

namespace flashbench {

// Human-readable warnings about a row's measurement (noise above target, cold first sample).
std::vector<std::string> row_warnings(const Row& row);

class Reporter {
 public:
  virtual ~Reporter();
  virtual void begin(const nlohmann::ordered_json& meta) = 0;
  virtual void add(const Row& row) = 0;
  // Every row of one configuration has been added: a format that prints a block per configuration
  // (table, md) prints it now, so that a sweep shows each block as its configuration finishes rather
  // than when the next one does. The caller flushes the stream.
  virtual void end_configuration();
  virtual void finish() = 0;
  // The sweep stopped early (a signal): `not_run` lists the configurations it did not run. Called
  // before finish(); formats that have a place for it say so (json: meta.complete = false and
  // meta.not_run), the others keep the rows they have.
  virtual void mark_incomplete(const nlohmann::ordered_json& not_run);
  // A value of the meta known only at the end (the load average then), at a JSON pointer such as
  // "/environment/load_average_end". Called before finish(); json writes it, the formats that
  // wrote their meta at begin (jsonl) or have none keep what they wrote.
  virtual void set_meta_at_end(const std::string& pointer, const nlohmann::ordered_json& value);
};

// format: "table" (aligned, human units; the best variant of each problem marked in colour when
// `terminal`), "json" (one document, written at finish), "jsonl" (meta line, then one row per add,
// flushed at once), "csv", "md". Throws UsageError on another name. When some variant ran at two
// N or more, table and md end with the sweep summary (summary.hpp), json gets a "summary" key and
// jsonl a last {"summary": ...} line. `table_width` [columns] keeps each table block within it
// (table_width_for says which); 0 prints every column (run --wide).
std::unique_ptr<Reporter> make_reporter(std::string_view format, std::ostream& out, bool terminal,
                                        int table_width = 0);

// The width the table keeps to, decided once for every command that prints one: 0 (no limit) when
// `wide`; else the terminal's width when stdout is one; else COLUMNS when it is set to a positive
// number; else 100 (a file or a pipe, read in an editor or a CI log).
int table_width_for(bool wide, bool stdout_is_terminal);
inline constexpr std::string_view kReportFormats = "table, json, jsonl, csv, md";

}  // namespace flashbench
