"""A peer's memory over one forward and backward, in the two files `flashbench run --trace` writes.

PyTorch records its caching allocator's history (torch.cuda.memory._record_memory_history, PyTorch
2.1 and later); `Recording` keeps it for one measured pass and writes, per row:
  - <name>.snapshot.pickle: torch's own snapshot (torch.cuda.memory._snapshot()), pickled as
    torch.cuda.memory._dump_snapshot does, for pytorch.org/memory_viz;
  - <name>.trace.json: a Chrome/Perfetto trace made from it the way flashbench's traces are made
    (docs/trace.md): a counter "memory: total" of the active bytes at the start and after every
    "alloc" and "free_completed", slices "forward" and "backward", and an instant "peak" where the
    total first reaches its maximum. torch does not tag its buffers, so there is no per-tag track.
chrome_trace() takes the snapshot as a plain dictionary, so it is tested without torch
(tests/scripts/peer_memory_trace_test.py).
"""
import json
import os
import pickle


def initially_active(snapshot, device=0):
    """Bytes active before the recording: blocks freed in the trace without an alloc in it, and the
    final segments' active blocks never allocated in it (memory_viz's reading)."""
    trace = snapshot["device_traces"][device]
    allocated = {e["addr"] for e in trace if e["action"] == "alloc"}
    before = sum(e["size"] for e in trace if e["action"] == "free_completed" and e["addr"] not in allocated)
    for segment in snapshot["segments"]:
        if segment.get("device", device) != device:
            continue
        address = segment["address"]
        for block in segment["blocks"]:  # a segment's blocks tile it in address order
            if block["state"] == "active_allocated" and address not in allocated:
                before += block["size"]
            address += block["size"]
    return before


def chrome_trace(snapshot, phases, title, device=0):
    """The trace of one pass. `phases` is [(name, first entry index, end entry index)] into the
    device's trace list ("forward", "backward"); times are the entries' time_us, made strictly
    increasing. Returns (trace dict, peak bytes)."""
    trace = snapshot["device_traces"][device]
    live = initially_active(snapshot, device)
    start_us = trace[0].get("time_us", 0) if trace else 0
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": title}},
              {"name": "memory: total", "ph": "C", "ts": 0, "pid": 1, "args": {"bytes": live}}]
    times = []
    last = 0.0
    peak, peak_ts = live, 0.0
    for index, entry in enumerate(trace):
        ts = max(float(entry.get("time_us", start_us) - start_us), last + 0.001)
        last = ts
        times.append(ts)
        if entry["action"] == "alloc":
            live += entry["size"]
        elif entry["action"] == "free_completed":
            live -= entry["size"]
        else:
            continue
        events.append({"name": "memory: total", "ph": "C", "ts": ts, "pid": 1, "args": {"bytes": live}})
        if live > peak:
            peak, peak_ts = live, ts
    for name, first, end in phases:
        if first >= end or first >= len(times):
            continue
        begin = times[first]
        finish = times[min(end, len(times)) - 1]
        events.append({"name": name, "cat": name, "ph": "X", "ts": begin, "dur": finish - begin, "pid": 1, "tid": 1})
    events.append({"name": "peak", "ph": "i", "s": "g", "ts": peak_ts, "pid": 1, "tid": 1, "args": {"bytes": peak}})
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"tool": "flashbench peer", "title": title}}, peak


class Recording:
    """with Recording(directory, name, title) as r: forward; r.phase_boundary(); backward.
    Does nothing (available is False) where PyTorch cannot record its allocator's history."""

    def __init__(self, directory, name, title):
        import torch
        self.torch = torch
        self.directory, self.name, self.title = directory, name, title
        self.available = directory is not None and hasattr(torch.cuda.memory, "_record_memory_history")
        self.boundary = None
        self.peak = None

    def __enter__(self):
        if self.available:
            self.torch.cuda.synchronize()
            self.torch.cuda.memory._record_memory_history(max_entries=1_000_000)
        return self

    def phase_boundary(self):
        """Marks the end of the forward: how many entries the trace holds now."""
        if self.available:
            self.torch.cuda.synchronize()
            device = self.torch.cuda.current_device()
            self.boundary = len(self.torch.cuda.memory._snapshot()["device_traces"][device])

    def __exit__(self, kind, value, traceback):
        if not self.available:
            return False
        self.torch.cuda.synchronize()
        snapshot = self.torch.cuda.memory._snapshot()
        self.torch.cuda.memory._record_memory_history(enabled=None)
        if kind is not None:
            return False
        device = self.torch.cuda.current_device()
        entries = len(snapshot["device_traces"][device])
        boundary = self.boundary if self.boundary is not None else entries
        trace, self.peak = chrome_trace(snapshot, [("forward", 0, boundary), ("backward", boundary, entries)],
                                        self.title, device)
        os.makedirs(self.directory, exist_ok=True)
        base = os.path.join(self.directory, self.name)
        write_atomically(base + ".snapshot.pickle", pickle.dumps(snapshot))
        write_atomically(base + ".trace.json", (json.dumps(trace) + "\n").encode())
        return False


def write_atomically(path, data):
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)
