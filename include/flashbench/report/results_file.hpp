#pragma once
// Results files read back (.json and .jsonl, the contract of docs/json.md), for compare, merge,
// --resume and the plots' tests.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/core/result.hpp"

namespace flashbench {

// A document as read back: {schema_version, meta, rows} from a .json file, or the same from a
// .jsonl stream (a first line holding {schema_version, meta}, then one row per line). A .jsonl whose
// last line is cut short (no newline, not JSON: a process killed while writing it) loses that line
// and says so; any other line that is not JSON makes it no results file.
struct ResultsFile {
  nlohmann::ordered_json schema_version;            // null when the file names none
  nlohmann::ordered_json meta;                      // null when there is none
  std::vector<Row> rows;
  std::vector<nlohmann::ordered_json> row_objects;  // the same rows as written, every key kept in order
  bool cut_last_line = false;
};
ResultsFile read_results_file(const std::string& path);  // throws RuntimeFailure / UsageError
// The same from the file's text: `lines` for the .jsonl form; `path` names it in errors.
ResultsFile parse_results(std::string_view text, bool lines, std::string_view path);
// A file of another schema version would be misread key by key: a UsageError naming it, unless the
// file names none (an older flashbench) or ours. `merge` instead compares its inputs' versions.
void require_our_schema(const ResultsFile& file, std::string_view path);

}  // namespace flashbench
