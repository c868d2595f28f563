// The reporter factory, human units, atomic file writes, and the per-problem grouping and cells that
// the table and markdown reporters share.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <utility>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/report/files.hpp"
#include "flashbench/report/reporter.hpp"
#include "reporters.hpp"

namespace flashbench {

Reporter::~Reporter() = default;
void Reporter::mark_incomplete(const nlohmann::ordered_json&) {}
void Reporter::end_configuration() {}
void Reporter::set_meta_at_end(const std::string&, const nlohmann::ordered_json&) {}

std::unique_ptr<Reporter> make_reporter(std::string_view format, std::ostream& out, bool terminal, int table_width) {
  using namespace report_detail;
  if (format == "table") return make_table_reporter(out, terminal, table_width);
  if (format == "json") return make_json_reporter(out);
  if (format == "jsonl") return make_jsonl_reporter(out);
  if (format == "csv") return make_csv_reporter(out);
  if (format == "md") return make_markdown_reporter(out);
  throw UsageError(fmt::format("unknown --format '{}' (expected {})", format, kReportFormats));
}

int table_width_for(bool wide, bool stdout_is_terminal) {
  if (wide) return 0;
  winsize size{};
  if (stdout_is_terminal && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long value = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && value > 0 && value < 100000) return int(value);
  }
  return 100;
}

namespace {
// Writes all of `contents` to `fd`; false (errno set) on a failed write.
bool write_all(int fd, const std::string& contents) {
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    written += static_cast<size_t>(n);
  }
  return true;
}

// A path that names something other than a regular file (a pipe, a terminal, a device) is written
// into as it is: renaming a temporary file over it would replace the pipe or the device node itself.
void write_in_place(const std::string& path, const std::string& contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw RuntimeFailure(fmt::format("cannot write '{}': open ({})", path, std::strerror(errno)));
  const bool written = write_all(fd, contents);
  const int write_error = errno;
  const bool closed = ::close(fd) == 0;
  if (!written || !closed)
    throw RuntimeFailure(fmt::format("cannot write '{}': {}", path, std::strerror(written ? errno : write_error)));
}
}  // namespace

namespace {
// True when `path` is replaced by renaming a temporary file over it (a regular file, or nothing
// yet); false when it names a pipe, a terminal or a device, which is written into as it is. A
// directory is a RuntimeFailure here (check_writable makes it a usage error before a run).
bool replaced_by_rename(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status) || fs::is_regular_file(status)) return true;
  if (fs::is_directory(status)) throw RuntimeFailure(fmt::format("cannot write '{}': it is a directory", path));
  return false;
}

// A new temporary file (mode 0600) in the directory of `path`, where a rename over `path` is atomic;
// its descriptor and name. Throws RuntimeFailure when the directory does not take one.
std::pair<int, std::string> create_temporary_beside(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string temp = (directory / fmt::format(".{}.XXXXXX", target.filename().string())).string();
  const int fd = mkstemp(temp.data());
  if (fd < 0)
    throw RuntimeFailure(fmt::format("cannot create a temporary file in '{}': {}", directory.string(),
                                     std::strerror(errno)));
  return {fd, temp};
}
}  // namespace

void check_writable(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))  // the command line named the wrong thing
    throw UsageError(fmt::format("cannot write '{}': it is a directory", path));
  if (!replaced_by_rename(path)) return;  // a pipe or a device: opened when the results are written
  const auto [fd, temp] = create_temporary_beside(path);
  ::close(fd);
  ::unlink(temp.c_str());
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  if (!replaced_by_rename(path)) return write_in_place(path, contents);
  // Plain variables, not a structured binding: the lambda below captures them (C++20 allows
  // capturing bindings, clang before 16 does not).
  const std::pair<int, std::string> created = create_temporary_beside(path);
  const int fd = created.first;
  const std::string& temp = created.second;
  const auto fail = [&](std::string_view what) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    ::unlink(temp.c_str());
    throw RuntimeFailure(fmt::format("cannot write '{}': {} ({})", path, what, reason));
  };
  if (!write_all(fd, contents)) fail("write");
  // mkstemp creates 0600; results are ordinary files.
  if (::fchmod(fd, 0644) != 0) fail("chmod");
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    throw RuntimeFailure(fmt::format("cannot write '{}': close ({})", path, reason));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    throw RuntimeFailure(fmt::format("cannot write '{}': rename ({})", path, reason));
  }
}

namespace report_detail {

std::string wrap_text(const std::string& text, size_t width, size_t indent) {
  if (width == 0 || text.size() <= width) return text;
  std::string out;
  size_t start = std::min(text.find_first_not_of(' '), text.size());
  std::string line = text.substr(0, start);  // the first line's own indent
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (line.find_first_not_of(' ') != std::string::npos && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent, ' ');
    } else if (line.find_first_not_of(' ') != std::string::npos) {
      line += ' ';
    }
    line += word;
    start = end + 1;
  }
  return out + line;
}

namespace {

bool same_group(const Row& a, const Row& b) {
  return a.backend == b.backend && same_problem(a.problem, b.problem);
}

bool timed(const Row& row) { return row.status == Status::ok && row.fwd.median_ms > 0 && row.bwd.median_ms > 0; }
double total_ms(const Row& row) { return row.fwd.median_ms + row.bwd.median_ms; }

std::string ratio(double value) { return fmt::format("{:.2f}x", value); }

std::string signed_percent(double fraction) { return fmt::format("{:+.1f}%", 100 * fraction); }

std::string status_cell(const Row& row) {
  if (row.status == Status::ok) return row_warnings(row).empty() ? "ok" : "ok !";
  std::string text(to_string(row.status));
  if (!row.reason.empty()) text += ": " + row.reason;
  return text;
}

}  // namespace

std::string describe_meta(const nlohmann::ordered_json& meta) {
  if (!meta.is_object()) return "flashbench";
  std::string text = meta.value("tool", std::string("flashbench"));
  if (meta.contains("version")) text += fmt::format(" {}", meta["version"].get<std::string>());
  if (meta.contains("git")) text += fmt::format(" ({})", meta["git"].get<std::string>());
  if (meta.contains("host") && meta["host"].contains("cpu")) text += fmt::format(", {}", meta["host"]["cpu"].get<std::string>());
  if (meta.contains("gpu") && meta["gpu"].is_object() && meta["gpu"].contains("name"))
    text += fmt::format(", {}", meta["gpu"]["name"].get<std::string>());
  return text;
}

namespace {
// "235 GFLOP/s", or "235 GFLOP/s 76%" when the row has a CPU ceiling to read it against.
std::string rate_cell(double tflops, std::optional<double> of_peak) {
  return of_peak ? fmt::format("{} {:.0f}%", format_throughput(tflops), 100 * *of_peak) : format_throughput(tflops);
}
}  // namespace

GroupTable tabulate_group(const std::vector<Row>& rows) {
  GroupTable table;
  if (rows.empty()) return table;
  const Row& first = rows.front();
  table.title = fmt::format("{}: {}", first.backend, first.problem.describe());
  if (!first.device.empty()) table.title += ", " + first.device;
  if (first.threads > 0) table.title += ", " + counted(first.threads, "thread");
  if (first.peak_gflops) table.title += fmt::format("; rate % of the {:.0f} GFLOP/s sgemm ceiling", *first.peak_gflops);

  table.headers = {"variant", "fwd", "bwd", "bwd/fwd", "fwd rate", "bwd rate", "kept", "peak",
                   "model peak", "peak-model", "time/std", "peak/std", "check", "status"};
  table.right_aligned = {false, true, true, true, true, true, true, true, true, true, true, true, true, false};

  const Row* standard = nullptr;
  for (const Row& row : rows)
    if (row.implementation() == "standard" && row.status == Status::ok) standard = &row;

  int ok_count = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!timed(rows[i])) continue;
    ++ok_count;
    if (table.best_row < 0 || total_ms(rows[i]) < total_ms(rows[size_t(table.best_row)])) table.best_row = int(i);
  }
  if (ok_count < 2) table.best_row = -1;

  const std::string none = "-";
  for (const Row& row : rows) {
    const bool has_time = timed(row);
    const bool has_memory = row.status == Status::ok && row.measured.peak_bytes > 0;
    std::vector<std::string> cells;
    cells.push_back(row.implementation());
    cells.push_back(has_time ? format_duration_ms(row.fwd.median_ms) : none);
    cells.push_back(has_time ? format_duration_ms(row.bwd.median_ms) : none);
    cells.push_back(has_time ? ratio(row.bwd.median_ms / row.fwd.median_ms) : none);
    cells.push_back(has_time ? rate_cell(row.fwd_tflops(), row.fwd_of_peak()) : none);
    cells.push_back(has_time ? rate_cell(row.bwd_tflops(), row.bwd_of_peak()) : none);
    cells.push_back(has_memory ? format_bytes(row.measured.kept_bytes) : none);
    cells.push_back(has_memory ? format_bytes(row.measured.peak_bytes) : none);
    cells.push_back(row.model ? format_bytes(row.model->peak_bytes) : none);
    cells.push_back(row.model && has_memory && row.model->peak_bytes > 0
                        ? signed_percent(double(row.measured.peak_bytes - row.model->peak_bytes) /
                                         double(row.model->peak_bytes))
                        : none);
    cells.push_back(has_time && standard && timed(*standard) ? ratio(total_ms(row) / total_ms(*standard)) : none);
    cells.push_back(has_memory && standard && standard->measured.peak_bytes > 0
                        ? ratio(double(row.measured.peak_bytes) / double(standard->measured.peak_bytes))
                        : none);
    if (!row.check) cells.push_back(row.not_checked.empty() ? none : "not checked");
    else if (row.check->passed()) cells.push_back(fmt::format("{:.1e}", row.check->max_rel_err));
    else cells.push_back(fmt::format("FAIL {:.1e}", row.check->max_rel_err));
    cells.push_back(status_cell(row));
    table.cells.push_back(std::move(cells));
    for (const std::string& warning : row_warnings(row))
      table.notes.push_back(fmt::format("{}: {}", row.implementation(), warning));
  }
  return table;
}

void GroupingReporter::add(const Row& row) {
  if (!group_.empty() && !same_group(group_.front(), row)) flush_group();
  group_.push_back(row);
  all_.push_back(row);
}

void GroupingReporter::end_configuration() { flush_group(); }

void GroupingReporter::finish() {
  flush_group();
  write_end(all_);
}

void GroupingReporter::flush_group() {
  if (group_.empty()) return;
  write_group(group_);
  group_.clear();
}

}  // namespace report_detail
}  // namespace flashbench
