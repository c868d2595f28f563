#pragma once
// `run --trace DIR`: one Chrome / Perfetto trace per row (the Trace Event Format's JSON object form,
// which ui.perfetto.dev and chrome://tracing open as they are) of the row's measured pass:
//   - counter events ("ph": "C") "memory: <tag>" for each tag and "memory: total", args {"bytes"},
//     one sample at ts 0 (what was live when the pass began: the inputs) and one at every
//     allocation and release after it; sample times strictly increase;
//   - complete events ("ph": "X") "forward" and "backward" for the pass, with "forward layer i" /
//     "backward layer i" nested in them;
//   - an instant event ("ph": "i", "s": "g") "peak" where the total first reaches its maximum, with
//     the split by tag and the phase in its args.
// Times are host time in microseconds from the start of the pass. On a GPU the spans show when the
// host issued the work, the memory samples when the host allocated: kernels run asynchronously.
// Replaying "memory: total" (or summing the tag counters) gives the row's measured.peak_bytes exactly.
#include <string>

#include <nlohmann/json.hpp>

#include "flashbench/result.hpp"
#include "flashbench/timeline.hpp"

namespace flashbench {

nlohmann::ordered_json trace_to_json(const Row& row, const MemoryTimeline& timeline);

// "<backend>-<impl>-B<B>-H<H>-N<N>-d<d>-L<L>[-causal]-<dtype>.trace.json": fixed by the row alone, so
// shards writing into one directory never collide and a rerun replaces its own files.
std::string trace_file_name(const Row& row);

// Creates `directory` (and its parents) or throws UsageError saying why, so that a run whose traces
// could not be written stops before it starts.
void prepare_trace_directory(const std::string& directory);

// Writes the row's trace (atomically) into `directory` under trace_file_name(row); rows without a
// timeline (skipped, out of memory) have none. Throws RuntimeFailure when the file cannot be written.
void write_trace_file(const std::string& directory, const Row& row);

}  // namespace flashbench
