#pragma once
// `run --export-json F --export-csv G --export-md H`: the same rows written, in other formats, to
// files beside the report on the terminal (or --out). Each export is a reporter of its own fed every
// row, written atomically once the run ends, interrupted or not, so an export holds every finished
// row and is never half-written.
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "flashbench/report/reporter.hpp"

namespace flashbench::cli {

struct ExportFlags {
  std::optional<std::string> json, csv, md;  // the files named by --export-json, --export-csv, --export-md
};

class Exports {
 public:
  // Refuses (UsageError) two flags naming one file, or one naming --out; fails as check_writable does
  // where a file could not be written, before anything is measured.
  Exports(const ExportFlags& flags, const std::optional<std::string>& out);
  Exports(const Exports&) = delete;
  Exports& operator=(const Exports&) = delete;

  // The report reporter `main` and every export as one reporter: each call goes to all of them.
  std::unique_ptr<Reporter> beside(std::unique_ptr<Reporter> main);
  // Writes each export's file (after the reporters' finish()).
  void commit();
  // The files, quoted and joined ("'a.json', 'a.md'"), or "" with none.
  std::string describe() const;

 private:
  struct Export {
    std::string path;
    std::string format;
    std::ostringstream text;
  };
  std::vector<std::unique_ptr<Export>> exports_;
};

}  // namespace flashbench::cli
