#!/usr/bin/env python3
"""scripts/peers/memory_trace.py without torch: a snapshot dictionary shaped as torch's (segments
with blocks, device_traces with alloc / free_requested / free_completed / segment_* entries) turns
into a trace whose "memory: total" replays to the right peak, starts from the blocks active before
the recording, and has forward/backward slices over the right entries.

usage: tests/scripts/peer_memory_trace_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(sys.argv[2]) / "scripts" / "peers"))
import memory_trace  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def entry(action, addr, size, time_us):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": time_us, "frames": []}


def main():
    # Before recording: q (100 bytes at 0x1000, alive throughout) and a buffer at 0x2000 (50 bytes)
    # that the pass frees. The forward allocates o (200) and a workspace (300, freed); the
    # backward allocates a gradient (400) and frees o.
    trace = [
        entry("segment_alloc", 0x3000, 1024, 10), entry("alloc", 0x3000, 200, 10),  # o: 150 + 200 = 350
        entry("alloc", 0x3100, 300, 11),                                               # 650
        entry("free_requested", 0x3100, 300, 12), entry("free_completed", 0x3100, 300, 12),  # 350
        entry("free_completed", 0x2000, 50, 13),                                       # 300 (freed, never allocated)
        entry("alloc", 0x4000, 400, 20),                                               # 700: the peak
        entry("free_completed", 0x3000, 200, 21),                                      # 500
    ]
    snapshot = {
        "segments": [
            {"device": 0, "address": 0x1000, "total_size": 512, "stream": 0,
             "blocks": [{"address": 0x1000, "size": 100, "requested_size": 100, "state": "active_allocated"},
                        {"address": 0x1064, "size": 412, "requested_size": 412, "state": "inactive"}]},
            {"device": 0, "address": 0x4000, "total_size": 400, "stream": 0,
             "blocks": [{"address": 0x4000, "size": 400, "requested_size": 400, "state": "active_allocated"}]},
        ],
        "device_traces": [trace],
    }
    check(memory_trace.initially_active(snapshot) == 150, "active before the recording: q (100) + the freed 50")
    result, peak = memory_trace.chrome_trace(snapshot, [("forward", 0, 6), ("backward", 6, len(trace))], "t")
    check(peak == 700, f"peak {peak} == 700")
    totals = [e["args"]["bytes"] for e in result["traceEvents"] if e["ph"] == "C"]
    check(totals == [150, 350, 650, 350, 300, 700, 500], f"total after each alloc and free {totals}")
    times = [e["ts"] for e in result["traceEvents"] if e["ph"] == "C"]
    check(all(a < b for a, b in zip(times, times[1:])), "counter times strictly increase")
    slices = {e["name"]: e for e in result["traceEvents"] if e["ph"] == "X"}
    check(set(slices) == {"forward", "backward"}, f"slices {sorted(slices)}")
    check(slices["forward"]["ts"] < 0.01 and slices["backward"]["ts"] == 10,
          f"forward begins at the start, backward at its first entry ({slices['forward']['ts']}, {slices['backward']['ts']})")
    peaks = [e for e in result["traceEvents"] if e["ph"] == "i"]
    check(len(peaks) == 1 and peaks[0]["args"]["bytes"] == 700 and peaks[0]["ts"] == 10,
          "one peak instant at the gradient's allocation")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
