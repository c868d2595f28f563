#!/usr/bin/env python3
"""run --trace DIR: every row's Chrome/Perfetto trace, read back by a parser that follows the Trace
Event Format (JSON object form) and nothing of flashbench's: its counters replayed in time order
reach the row's measured peak to the byte, the per-tag counters add up to the total at every sample,
the forward/backward slices of every layer are there and nest, the peak instant sits at that peak;
file names are the documented ones; a directory that cannot be created stops the run before it
starts, with one line on stderr.

usage: trace_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

failures = 0
TAGS = ["input", "activation", "kept", "workspace", "grad"]


def check(condition, what):
    global failures
    if not condition:
        failures += 1
    print(f"{'ok' if condition else 'FAIL'} {what}")


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


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trace_dir = tmp / "traces" / "nested"  # created with its parent
        out = tmp / "run.json"
        cases = [  # every variant, several layers, causal and not, fp32 and 16-bit storage
            ["--seq", "96", "--heads", "2", "--head-dim", "16", "--layers", "3", "--causal"],
            ["--seq", "64", "--batch", "2", "--heads", "1", "--head-dim", "32", "--layers", "2", "--dtype", "bf16"],
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
                name = (f'{row["backend"]}-{row["impl"]}-B{p["batch"]}-H{p["heads"]}-N{p["seq"]}-d{p["head_dim"]}'
                        f'-L{p["layers"]}{"-causal" if p["causal"] else ""}-{p["dtype"]}.trace.json')
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
    print("FAILED" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
