#pragma once
// Turning rows into output: run metadata, the JSON form of a row (the contract in docs/json.md),
// and the reporters (table, json, jsonl, csv, md) behind one small interface. One reporter per
// file in src/report/.
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashbench/peak.hpp"
#include "flashbench/result.hpp"
#include "flashbench/units.hpp"

namespace flashbench {

inline constexpr int kSchemaVersion = 1;

// A value the contract writes as null when it is absent (nlohmann 3.11 converts no std::optional).
template <class T>
nlohmann::ordered_json json_or_null(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

// The run's metadata: tool, version, git revision, build {type, compiler, flags, native, cuda},
// host {cpu, cores, omp_threads, hostname}, time (ISO-8601 UTC), argv. The device a run uses adds
// its own block (Device::describe: "gpu" for CUDA); `run --peak` adds "cpu_peak" (docs/json.md).
nlohmann::ordered_json make_meta(const std::vector<std::string>& argv);

// One row in the JSON contract (docs/json.md lists every key, its unit and when it is null or
// absent): times [ms], memory [bytes], throughput [TFLOP/s], flop [FLOP]; a value that was not
// measured (an oom row's times) is null; warnings are the lines the table prints under the row.
nlohmann::ordered_json row_to_json(const Row& row);
// A row's `problem` block: {batch, heads, kv_heads, seq, seq_q, seq_k, head_dim, layers, causal,
// dropout, expand_kv, dtype} (docs/json.md).
nlohmann::ordered_json problem_to_json(const Problem& problem);
// The inverse, for `compare`, plots' tests and anything reading our own files. Missing optional
// parts (model, check, samples) stay empty; a missing required key throws UsageError.
Row row_from_json(const nlohmann::json& json);

// The CPU ceilings as `info --peak --format json` writes them ("peak": threads, simd, fma_gflops[_best],
// sgemm_size, sgemm_gflops[_best], openblas_sgemm_gflops (null without OpenBLAS), openblas_core,
// products), and back, for `run --peak-file`: empty unless threads, fma_gflops and a positive
// sgemm_gflops are there.
nlohmann::ordered_json peak_to_json(const PeakReport& peak);
std::optional<PeakReport> peak_from_json(const nlohmann::json& json);

// Human-readable warnings about a row's measurement (noise above target, cold first sample).
std::vector<std::string> row_warnings(const Row& row);

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

// Writes `contents` to a temporary file next to `path`, then renames it over `path`, so a reader
// never sees half a file. Throws RuntimeFailure and leaves nothing behind on error.
void write_file_atomically(const std::string& path, const std::string& contents);
// Fails before any work where write_file_atomically(path) would fail at the end of it: a directory
// (UsageError), a folder that is missing or refuses a new file (RuntimeFailure). A pipe or a device
// passes (it is opened when written).
void check_writable(const std::string& path);

}  // namespace flashbench
