#include "flashbench/report/trace.hpp"

#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/report/files.hpp"
#include "flashbench/report/pickle.hpp"

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

// memory_viz's view of a buffer: the allocation's address in a made-up address space (each buffer
// its own range, never reused, so that addresses name buffers), its size, and one frame saying
// what it is and where in the pass it was allocated.
struct SnapshotBuffer {
  int64_t address = 0;
  int64_t bytes = 0;
  ordered_json frames;
};

constexpr int64_t kFirstAddress = int64_t{1} << 32;
constexpr int64_t kAddressAlignment = 512;  // the CUDA caching allocator's rounding, for familiarity

// The innermost span open at `time_ns` ("forward layer 2"), or "" outside every span.
std::string span_at(const std::vector<TimelineSpan>& spans, int64_t time_ns) {
  std::string name;
  for (const TimelineSpan& span : spans) {  // in order of their beginning: the last match is the innermost
    if (span.begin_ns > time_ns) break;
    if (span.end_ns >= time_ns) name = span.name;
  }
  return name;
}

ordered_json frame(const Row& row, std::string_view what, std::string_view where) {
  return ordered_json::array({{{"filename", fmt::format("{} {}", row.backend, row.implementation())},
                               {"line", 0},
                               {"name", where.empty() ? std::string(what) : fmt::format("{} ({})", what, where)}}});
}

ordered_json trace_entry(std::string_view action, const SnapshotBuffer& buffer, int64_t time_ns) {
  return {{"action", action}, {"addr", buffer.address}, {"size", buffer.bytes}, {"stream", 0},
          {"time_us", time_ns / 1000}, {"frames", buffer.frames}};
}

// A buffer live when the snapshot is taken: its own segment (flashbench allocates each buffer
// directly, with no caching allocator between), holding one active block.
ordered_json live_segment(const SnapshotBuffer& buffer) {
  ordered_json block = {{"address", buffer.address}, {"size", buffer.bytes}, {"requested_size", buffer.bytes},
                        {"state", "active_allocated"}, {"frames", buffer.frames}};
  return {{"device", 0},
          {"address", buffer.address},
          {"total_size", buffer.bytes},
          {"allocated_size", buffer.bytes},
          {"active_size", buffer.bytes},
          {"requested_size", buffer.bytes},
          {"stream", 0},
          {"segment_type", buffer.bytes > (int64_t{1} << 20) ? "large" : "small"},
          {"segment_pool_id", ordered_json::array({0, 0})},
          {"is_expandable", false},
          {"frames", ordered_json::array()},
          {"blocks", ordered_json::array({std::move(block)})}};
}

}  // namespace

nlohmann::ordered_json memory_snapshot(const Row& row, const MemoryTimeline& timeline) {
  int64_t next_address = kFirstAddress;
  auto place = [&next_address](int64_t bytes) {
    const int64_t address = next_address;
    next_address += (std::max<int64_t>(bytes, 1) + kAddressAlignment - 1) / kAddressAlignment * kAddressAlignment;
    return address;
  };

  std::vector<SnapshotBuffer> buffers;        // by MemoryEvent::buffer
  std::vector<bool> live;                     // ... and whether it is still allocated at the end
  TagBytes before_start = timeline.live_at_start();  // less what the pass released of it
  ordered_json trace = ordered_json::array();
  for (const MemoryEvent& event : timeline.events()) {
    if (event.buffer < 0)
      throw RuntimeFailure("the memory snapshot needs every allocation's address, and one was recorded without it");
    const std::string tag(to_string(event.tag));
    if (event.delta_bytes > 0 || event.before_start) {
      if (static_cast<size_t>(event.buffer) != buffers.size())
        throw RuntimeFailure("the memory timeline numbered its buffers out of order");
      const int64_t bytes = event.delta_bytes > 0 ? event.delta_bytes : -event.delta_bytes;
      const std::string where = event.before_start ? "allocated before the pass" : span_at(timeline.spans(), event.time_ns);
      buffers.push_back({place(bytes), bytes, frame(row, tag, where)});
      live.push_back(true);
    }
    const SnapshotBuffer& buffer = buffers[event.buffer];
    if (event.delta_bytes > 0) {
      trace.push_back(trace_entry("segment_alloc", buffer, event.time_ns));
      trace.push_back(trace_entry("alloc", buffer, event.time_ns));
    } else {
      // A buffer from before the pass has no alloc: memory_viz draws it from the start.
      if (event.before_start) before_start[event.tag] -= buffer.bytes;
      trace.push_back(trace_entry("free_requested", buffer, event.time_ns));
      trace.push_back(trace_entry("free_completed", buffer, event.time_ns));
      trace.push_back(trace_entry("segment_free", buffer, event.time_ns));
      live[event.buffer] = false;
    }
  }

  // Segments: what is live at the end. The bytes live at the start that the pass never released
  // (the inputs, mostly) are one buffer per tag: the ledger saw them before the timeline began.
  ordered_json segments = ordered_json::array();
  for (Tag tag : kAllTags) {
    if (before_start[tag] <= 0) continue;
    const SnapshotBuffer buffer{place(before_start[tag]), before_start[tag],
                                frame(row, to_string(tag), "allocated before the pass, live throughout")};
    segments.push_back(live_segment(buffer));
  }
  for (size_t i = 0; i < buffers.size(); ++i)
    if (live[i]) segments.push_back(live_segment(buffers[i]));

  ordered_json snapshot;
  snapshot["segments"] = std::move(segments);
  snapshot["device_traces"] = ordered_json::array({std::move(trace)});
  snapshot["flashbench"] = {{"backend", row.backend},
                            {"impl", row.implementation()},
                            {"problem", row.problem.describe()},
                            {"measured_peak_bytes", row.measured.peak_bytes}};
  return snapshot;
}

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
  // The workload's axes too ("G=2 Nk=8192 dropout=0.1" -> "-G2-Nk8192-dropout0.1"): rows that differ
  // only in them would otherwise write over each other's files.
  std::string workload = p.workload();
  std::erase(workload, '=');
  std::replace(workload.begin(), workload.end(), ' ', '-');
  return fmt::format("{}-{}-B{}-H{}-N{}-d{}-L{}{}{}{}-{}", row.backend, row.implementation(), p.batch, p.heads, p.seq,
                     p.head_dim, p.layers, p.causal ? "-causal" : "", workload.empty() ? "" : "-", workload,
                     to_string(p.dtype));
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
  const std::filesystem::path base = std::filesystem::path(directory) / trace_file_name(row);
  write_file_atomically(base.string() + ".trace.json", trace_to_json(row, *row.timeline).dump() + "\n");
  write_file_atomically(base.string() + ".snapshot.pickle", to_pickle(memory_snapshot(row, *row.timeline)));
}

}  // namespace flashbench
