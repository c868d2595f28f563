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

#include "flashbench/core/result.hpp"
#include "flashbench/core/timeline.hpp"

namespace flashbench {

nlohmann::ordered_json trace_to_json(const Row& row, const MemoryTimeline& timeline);

// The same pass as a snapshot in the format of PyTorch's memory snapshots (`torch.cuda.memory.
// _snapshot()`, pickled by write_trace_file), which memory_viz draws:
//   - "device_traces": [[entry...]]: per buffer allocated in the pass "segment_alloc" then "alloc",
//     per release "free_requested", "free_completed", "segment_free"; each entry {action, addr, size,
//     stream 0, time_us, frames: [{filename: "<backend> <impl>", line 0, name: "<tag> (<span>)"}]};
//   - "segments": what is live at the end, one segment per buffer (flashbench has no caching
//     allocator), each with one "active_allocated" block; the bytes live before the pass that it
//     never released are one buffer per tag;
//   - "flashbench": the row (backend, impl, problem, measured_peak_bytes).
// Addresses are made up (each buffer its own range from 2^32, 512-byte aligned, never reused).
// Replaying it — the live segments' blocks never allocated in the trace and the buffers freed
// without an alloc are live at the start, then +size per "alloc" and -size per "free_completed" —
// gives the row's measured.peak_bytes. Throws RuntimeFailure when an event has no buffer.
nlohmann::ordered_json memory_snapshot(const Row& row, const MemoryTimeline& timeline);

// "<backend>-<impl>-B<B>-H<H>-N<N>-d<d>-L<L>[-causal][-G<G>][-Nk<N_k>][-expand-kv][-dropout<p>]-<dtype>",
// the name of both files without their extensions (.trace.json, .snapshot.pickle): fixed by the row
// alone, so shards writing into one directory never collide and a rerun replaces its own files.
std::string trace_file_name(const Row& row);

// Creates `directory` (and its parents) or throws UsageError saying why, so that a run whose traces
// could not be written stops before it starts.
void prepare_trace_directory(const std::string& directory);

// Writes the row's trace and snapshot (each atomically) into `directory` under trace_file_name(row);
// rows without a timeline (skipped, out of memory) have none. Throws RuntimeFailure when a file
// cannot be written.
void write_trace_file(const std::string& directory, const Row& row);

}  // namespace flashbench
