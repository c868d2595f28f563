#include "exports.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/report/files.hpp"
#include "flashbench/report/reporter.hpp"

namespace flashbench::cli {

namespace {

// Every call to each reporter in turn, in the order given (the main report first).
class FanOutReporter final : public Reporter {
 public:
  explicit FanOutReporter(std::vector<std::unique_ptr<Reporter>> reporters) : reporters_(std::move(reporters)) {}
  void begin(const nlohmann::ordered_json& meta) override {
    for (auto& reporter : reporters_) reporter->begin(meta);
  }
  void add(const Row& row) override {
    for (auto& reporter : reporters_) reporter->add(row);
  }
  void end_configuration() override {
    for (auto& reporter : reporters_) reporter->end_configuration();
  }
  void finish() override {
    for (auto& reporter : reporters_) reporter->finish();
  }
  void mark_incomplete(const nlohmann::ordered_json& not_run) override {
    for (auto& reporter : reporters_) reporter->mark_incomplete(not_run);
  }
  void set_meta_at_end(const std::string& pointer, const nlohmann::ordered_json& value) override {
    for (auto& reporter : reporters_) reporter->set_meta_at_end(pointer, value);
  }

 private:
  std::vector<std::unique_ptr<Reporter>> reporters_;
};

// Two names of one file: the same text, or the same file reached by another path.
bool same_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::error_code error;
  return std::filesystem::equivalent(a, b, error) && !error;
}

}  // namespace

Exports::Exports(const ExportFlags& flags, const std::optional<std::string>& out) {
  std::vector<std::pair<std::string, std::string>> named;  // flag, path
  const auto add = [&](const std::optional<std::string>& path, const char* format) {
    if (!path) return;
    const std::string flag = fmt::format("--export-{}", format);
    if (out && same_file(*path, *out)) throw UsageError(fmt::format("{} and --out both name '{}'", flag, *path));
    for (const auto& [other_flag, other_path] : named)
      if (same_file(*path, other_path))
        throw UsageError(fmt::format("{} and {} both name '{}'", other_flag, flag, *path));
    check_writable(*path);
    named.emplace_back(flag, *path);
    auto entry = std::make_unique<Export>();
    entry->path = *path;
    entry->format = format;
    exports_.push_back(std::move(entry));
  };
  add(flags.json, "json");
  add(flags.csv, "csv");
  add(flags.md, "md");
}

std::unique_ptr<Reporter> Exports::beside(std::unique_ptr<Reporter> main) {
  if (exports_.empty()) return main;
  std::vector<std::unique_ptr<Reporter>> reporters;
  reporters.push_back(std::move(main));
  for (auto& entry : exports_) reporters.push_back(make_reporter(entry->format, entry->text, false));
  return std::make_unique<FanOutReporter>(std::move(reporters));
}

void Exports::commit() {
  for (auto& entry : exports_) write_file_atomically(entry->path, entry->text.str());
}

std::string Exports::describe() const {
  std::string text;
  for (const auto& entry : exports_) text += fmt::format("{}'{}'", text.empty() ? "" : ", ", entry->path);
  return text;
}

}  // namespace flashbench::cli
