#!/usr/bin/env python3
"""run --trace DIR: every row's Chrome/Perfetto trace, read back by a parser that follows the Trace
Event Format (JSON object form) and nothing of flashbench's: its counters replayed in time order
reach the row's measured peak to the byte, the per-tag counters add up to the total at every sample,
the forward/backward slices of every layer are there and nest, the peak instant sits at that peak;
file names are the documented ones; a directory that cannot be created stops the run before it
starts, with one line on stderr.
Beside each trace, the PyTorch memory snapshot (.snapshot.pickle), read with Python's pickle and
replayed the way memory_viz's Active Memory Timeline does: its peak is the row's measured peak too,
and what its segments hold at the end is what the trace's total ends at.

usage: tests/cli/trace_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402
TAGS = ["input", "activation", "kept", "workspace", "grad"]


def replay(trace):
    """Counter tracks as the viewers build them: events ordered by ts; a "C" event sets each of its
    args' series to the value given until the next sample. Returns the samples of every counter name
    [(ts, value)] (one series, "bytes", per name here) and the highest sum of the tag counters."""
    events = trace["traceEvents"]
    counters = sorted((e for e in events if e["ph"] == "C"), key=lambda e: e["ts"])  # sorted() is stable
    series = {}
    for event in counters:
        for key, value in event["args"].items():
            series.setdefault(f'{event["name"]} {key}', []).append((event["ts"], value))
    # The sum of the tag tracks at every instant where one of them changes.
    current = {}
    sum_peak = 0
    for event in counters:
        if event["name"] != "memory: total":
            current[event["name"]] = event["args"]["bytes"]
            sum_peak = max(sum_peak, sum(current.values()))
    return series, sum_peak


def replay_snapshot(snapshot):
    """memory_viz's Active Memory Timeline: buffers freed in the trace without an alloc, and the
    active blocks of the final segments never allocated in the trace, were live from the start; then
    each "alloc" adds its size and each "free_completed" removes it. Returns (peak, live at the end)."""
    trace = snapshot["device_traces"][0]
    allocated = {e["addr"] for e in trace if e["action"] == "alloc"}
    initially = sum(e["size"] for e in trace if e["action"] == "free_completed" and e["addr"] not in allocated)
    initially += sum(b["size"] for seg in snapshot["segments"] for b in seg["blocks"]
                     if b["state"] == "active_allocated" and b["address"] not in allocated)
    live = peak = initially
    for e in trace:
        if e["action"] == "alloc":
            live += e["size"]
        elif e["action"] == "free_completed":
            live -= e["size"]
        peak = max(peak, live)
    return peak, live


def check_snapshot(path, name, row, trace_end_bytes):
    check(path.is_file(), f"{path.name} written")
    if not path.is_file():
        return
    with path.open("rb") as f:
        snapshot = pickle.load(f)
    check(set(snapshot) >= {"segments", "device_traces"}, f"{path.name}: segments and device_traces")
    trace = snapshot["device_traces"][0]
    check(all({"action", "addr", "size", "stream", "frames"} <= e.keys() for e in trace),
          f"{path.name}: every entry has action, addr, size, stream, frames")
    check(all(e["frames"] and any(tag in e["frames"][0]["name"] for tag in TAGS) for e in trace),
          f"{path.name}: every entry's frame names its tag")
    check(all({"device", "address", "total_size", "blocks"} <= s.keys() for s in snapshot["segments"]),
          f"{path.name}: every segment has device, address, total_size, blocks")
    peak, end = replay_snapshot(snapshot)
    measured = row["memory"]["measured"]["peak_bytes"]
    check(peak == measured, f"{path.name}: replayed peak {peak} == measured {measured}")
    held = sum(b["size"] for seg in snapshot["segments"] for b in seg["blocks"])
    check(end == held == trace_end_bytes, f"{path.name}: live at the end {end} == segments {held} == trace {trace_end_bytes}")


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trace_dir = tmp / "traces" / "nested"  # created with its parent
        out = tmp / "run.json"
        cases = [  # every variant, several layers, causal and not, fp32 and 16-bit storage
            ["--seq", "96", "--heads", "2", "--head-dim", "16", "--layers", "3", "--causal"],
            ["--seq", "64", "--batch", "2", "--heads", "1", "--head-dim", "32", "--layers", "2", "--dtype", "bf16"],
            # GQA on a longer context with dropout: the file names carry these axes
            ["--seq", "40", "--seq-k", "56", "--heads", "4", "--kv-heads", "2", "--head-dim", "8", "--layers", "2",
             "--dropout", "0.1"],
        ]
        for flags in cases:
            result = subprocess.run([binary, "run", *flags, "--variant", "all", "--max-time", "0.05",
                                     "--min-samples", "5", "--format", "json", "--out", str(out),
                                     "--trace", str(trace_dir)], capture_output=True, text=True)
            check(result.returncode == 0, f"run {' '.join(flags)} --trace exits 0 ({result.stderr.strip()[:200]})")
            rows = json.loads(out.read_text())["rows"]
            check(len(rows) >= 4, f"{len(rows)} rows")
            for row in rows:
                p = row["problem"]
                workload = ""
                if p["kv_heads"] != p["heads"]:
                    workload += f'-G{p["kv_heads"]}'
                if p["seq_k"] != p["seq"]:
                    workload += f'-Nk{p["seq_k"]}'
                if p["expand_kv"]:
                    workload += "-expand-kv"
                if p["dropout"] > 0:
                    workload += f'-dropout{p["dropout"]:g}'
                base = (f'{row["backend"]}-{row["impl"]}-B{p["batch"]}-H{p["heads"]}-N{p["seq"]}-d{p["head_dim"]}'
                        f'-L{p["layers"]}{"-causal" if p["causal"] else ""}{workload}-{p["dtype"]}')
                name = base + ".trace.json"
                path = trace_dir / name
                check(path.is_file(), f"{name} written")
                if not path.is_file():
                    continue
                trace = json.loads(path.read_text())
                events = trace["traceEvents"]
                check(all({"name", "ph", "pid"} <= e.keys() for e in events), f"{name}: every event has name, ph, pid")
                check(all(isinstance(e["ts"], (int, float)) for e in events if e["ph"] != "M"),
                      f"{name}: every timed event has a numeric ts")
                series, sum_peak = replay(trace)
                measured = row["memory"]["measured"]["peak_bytes"]
                total = series.get("memory: total bytes", [])
                total_peak = max(v for _, v in total) if total else -1
                check(total_peak == measured, f"{name}: replayed total peak {total_peak} == measured {measured}")
                check(sum_peak == measured, f"{name}: replayed sum of the tag counters {sum_peak} == measured {measured}")
                check(all(f"memory: {tag} bytes" in series for tag in TAGS), f"{name}: a counter track per tag")
                check_snapshot(trace_dir / (base + ".snapshot.pickle"), name, row, total[-1][1] if total else -1)
                times = [t for t, _ in total]
                check(all(a < b for a, b in zip(times, times[1:])), f"{name}: counter samples strictly increase in time")
                slices = [e for e in events if e["ph"] == "X"]
                layers = p["layers"]
                expected = {f"{phase} layer {i}" for phase in ("forward", "backward") for i in range(layers)}
                expected |= {"forward", "backward"}
                check({e["name"] for e in slices} == expected, f"{name}: slices {sorted(e['name'] for e in slices)}")
                check(all(e["dur"] >= 0 for e in slices), f"{name}: slice durations are not negative")
                outer = {e["name"]: e for e in slices if e["name"] in ("forward", "backward")}
                nested = all(outer[e["cat"]]["ts"] <= e["ts"] and
                             e["ts"] + e["dur"] <= outer[e["cat"]]["ts"] + outer[e["cat"]]["dur"] + 1e-3
                             for e in slices if " layer " in e["name"])
                check(nested, f"{name}: every layer's slice lies inside its pass")
                peaks = [e for e in events if e["ph"] == "i" and e["name"] == "peak"]
                check(len(peaks) == 1 and peaks[0]["args"]["bytes"] == measured and
                      sum(peaks[0]["args"]["by_tag"].values()) == measured,
                      f"{name}: one peak instant of {measured} bytes")
                if peaks:
                    at_peak = [v for t, v in total if t == peaks[0]["ts"]]
                    check(at_peak == [measured], f"{name}: the total is at its peak at the instant's time")
                    check(peaks[0]["args"]["phase"] == row["memory"]["measured"]["peak_phase"],
                          f"{name}: the instant's phase is the row's peak phase")

        # A --trace that cannot be created: one line, exit 2, nothing run and no results file.
        blocker = tmp / "a-file"
        blocker.write_text("")
        bad_out = tmp / "never.json"
        result = subprocess.run([binary, "run", "--seq", "64", "--heads", "1", "--format", "json", "--out", str(bad_out),
                                 "--trace", str(blocker / "traces")], capture_output=True, text=True)
        lines = result.stderr.strip().splitlines()
        check(result.returncode == 2 and len(lines) == 1 and "--trace" in lines[0],
              f"an impossible --trace: exit {result.returncode}, stderr {lines}")
        check(not bad_out.exists(), "an impossible --trace writes no results")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
