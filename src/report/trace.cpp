#include "flashbench/trace.hpp"

#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "flashbench/errors.hpp"
#include "flashbench/report.hpp"

namespace flashbench {

namespace {

using nlohmann::ordered_json;

constexpr int kProcess = 1;  // one process and one thread: a trace holds one row
constexpr int kThread = 1;

double microseconds(int64_t ns) { return double(ns) / 1000.0; }

ordered_json counter(std::string_view name, int64_t time_ns, int64_t bytes) {
  return {{"name", fmt::format("memory: {}", name)}, {"ph", "C"}, {"ts", microseconds(time_ns)},
          {"pid", kProcess}, {"args", {{"bytes", bytes}}}};
}

ordered_json tag_split(const TagBytes& bytes) {
  ordered_json split;
  for (Tag tag : kAllTags) split[std::string(to_string(tag))] = bytes[tag];
  return split;
}

}  // namespace

nlohmann::ordered_json trace_to_json(const Row& row, const MemoryTimeline& timeline) {
  ordered_json events = ordered_json::array();
  const std::string title = fmt::format("flashbench {} {} {}", row.backend, row.implementation(), row.problem.describe());
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kProcess}, {"args", {{"name", title}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", kProcess}, {"tid", kThread},
                    {"args", {{"name", "layer stack"}}}});

  // Counters: the live bytes at the start, then after each allocation and release.
  TagBytes live = timeline.live_at_start();
  for (Tag tag : kAllTags) events.push_back(counter(to_string(tag), 0, live[tag]));
  events.push_back(counter("total", 0, live.total()));
  int64_t peak_bytes = live.total(), peak_ns = 0;
  TagBytes at_peak = live;
  Phase peak_phase = Phase::setup;
  for (const MemoryEvent& event : timeline.events()) {
    live[event.tag] += event.delta_bytes;
    events.push_back(counter(to_string(event.tag), event.time_ns, live[event.tag]));
    events.push_back(counter("total", event.time_ns, live.total()));
    if (live.total() > peak_bytes) {
      peak_bytes = live.total();
      peak_ns = event.time_ns;
      at_peak = live;
      peak_phase = event.phase;
    }
  }

  for (const TimelineSpan& span : timeline.spans())
    events.push_back({{"name", span.name}, {"cat", span.category}, {"ph", "X"}, {"ts", microseconds(span.begin_ns)},
                      {"dur", microseconds(span.end_ns - span.begin_ns)}, {"pid", kProcess}, {"tid", kThread}});

  events.push_back({{"name", "peak"}, {"ph", "i"}, {"s", "g"}, {"ts", microseconds(peak_ns)}, {"pid", kProcess},
                    {"tid", kThread},
                    {"args", {{"bytes", peak_bytes}, {"phase", std::string(to_string(peak_phase))},
                              {"by_tag", tag_split(at_peak)}}}});

  ordered_json trace;
  trace["traceEvents"] = std::move(events);
  trace["displayTimeUnit"] = "ns";
  trace["otherData"] = {{"tool", "flashbench"},
                        {"backend", row.backend},
                        {"impl", row.implementation()},
                        {"problem", row.problem.describe()},
                        {"measured_peak_bytes", row.measured.peak_bytes}};
  return trace;
}

std::string trace_file_name(const Row& row) {
  const Problem& p = row.problem;
  return fmt::format("{}-{}-B{}-H{}-N{}-d{}-L{}{}-{}.trace.json", row.backend, row.implementation(), p.batch, p.heads,
                     p.seq, p.head_dim, p.layers, p.causal ? "-causal" : "", to_string(p.dtype));
}

void prepare_trace_directory(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw UsageError(fmt::format("--trace: cannot create directory '{}': {}", directory, error.message()));
  if (!fs::is_directory(directory, error) || ::access(directory.c_str(), W_OK | X_OK) != 0)
    throw UsageError(fmt::format("--trace: '{}' is not a writable directory", directory));
}

void write_trace_file(const std::string& directory, const Row& row) {
  if (!row.timeline) return;
  const std::string path = (std::filesystem::path(directory) / trace_file_name(row)).string();
  write_file_atomically(path, trace_to_json(row, *row.timeline).dump() + "\n");
}

}  // namespace flashbench
