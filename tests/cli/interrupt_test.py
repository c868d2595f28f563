#!/usr/bin/env python3
"""An interrupted sweep keeps every finished row: SIGINT or SIGTERM stops it after the configuration
in hand, the output (json, csv) holds every finished row, json marks itself incomplete and lists the
configurations not run, and the exit code is 128 + the signal. A second signal ends it at once and
leaves no file under the requested name.

usage: tests/cli/interrupt_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEQS = [str(n) for n in range(64, 576, 32)]  # 16 configurations
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def start(binary, out, fmt):
    # Every implementation samples for 0.4 s (a noise target it cannot reach): about 1.6 s a
    # configuration at most, so a signal after 2.5 s finds the sweep well before its end.
    return subprocess.Popen([binary, "run", "--seq", ",".join(SEQS), "--heads", "2", "--max-time", "0.4",
                             "--max-noise", "0.000001", "--min-samples", "5", "--format", fmt, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for sig, fmt in ((signal.SIGINT, "json"), (signal.SIGTERM, "csv")):
            out = tmp / f"sweep.{fmt}"
            process = start(binary, out, fmt)
            time.sleep(2.5)
            process.send_signal(sig)
            _, err = process.communicate(timeout=300)
            check(process.returncode == 128 + sig, f"{sig.name}: exit {process.returncode} (want {128 + sig})")
            check("stopped by" in err, f"{sig.name}: says what finished ({err.strip()!r})")
            check(out.exists(), f"{sig.name}: the {fmt} file exists")
            if not out.exists():
                continue
            if fmt == "json":
                document = json.loads(out.read_text())
                rows, meta = document["rows"], document["meta"]
                done = sorted({r["problem"]["seq"] for r in rows})
                not_run = meta.get("not_run", [])
                check(meta.get("complete") is False, "json: meta.complete is false")
                check(len(rows) >= 4 and len(rows) % 4 == 0, f"json: whole configurations kept ({len(rows)} rows)")
                check(len(done) + len(not_run) == len(SEQS) and not_run,
                      f"json: finished {done} and not run {not_run} make the sweep")
            else:
                lines = out.read_text().splitlines()
                check(lines[0].startswith("backend,") and len(lines) >= 5, f"csv: header and rows ({len(lines)} lines)")

        # A second signal: at once, and nothing half-written under the name.
        out = tmp / "twice.json"
        process = start(binary, out, "json")
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
        check(process.returncode == -signal.SIGINT, f"second SIGINT ends it at once (returncode {process.returncode})")
        check(not out.exists(), "second SIGINT leaves no file under the requested name")
        check(not list(tmp.glob(".twice.json.*")), "... and no temporary file")

        # A sweep that is not interrupted says it is complete.
        out = tmp / "whole.json"
        done = subprocess.run([binary, "run", "--seq", "64", "--heads", "1", "--variant", "v2", "--max-time", "0.05",
                               "--format", "json", "--out", str(out)], capture_output=True, text=True, timeout=120)
        meta = json.loads(out.read_text())["meta"] if out.exists() else {}
        check(done.returncode == 0 and meta.get("complete") is True and "not_run" not in meta,
              "an uninterrupted sweep: meta.complete is true")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
