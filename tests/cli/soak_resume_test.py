#!/usr/bin/env python3
"""Soak: one sweep under a small --mem-limit (some configurations run, some are skipped for memory),
stopped by SIGTERM at random moments and resumed with --resume until it finishes, in json and in
jsonl. After every stop each file under the output folder is whole (a json document that parses,
jsonl lines that each parse, the last one included); the finished result holds the same
configurations, implementations and statuses as the same sweep run without a stop. Bounded: each
stop comes within twice the time one configuration takes on this machine, and a sweep that has not
finished after MAX_STOPS stops fails the test.

The moments come from a seeded generator, printed, so that a failure can be replayed (SOAK_SEED).

usage: tests/cli/soak_resume_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402

# 12 configurations x 4 variants; at 1 MiB the larger ones are skipped before they run. Every row
# that runs samples for its whole --max-time (a noise target it cannot reach): a few seconds in all.
SWEEP = ["run", "--seq", "64:416:+32", "--heads", "2", "--head-dim", "32", "--threads", "1", "--mem-limit", "1MiB",
         "--max-time", "0.15", "--max-noise", "0.000001", "--min-samples", "5", "--warmup-time", "0"]
MAX_STOPS = 40


def outcome(path, fmt):
    """(configuration, implementation) -> status of a finished file, and whether it says it is complete."""
    text = path.read_text()
    if fmt == "json":
        document = json.loads(text)
        rows, complete = document["rows"], not document["meta"].get("incomplete")
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        rows = [r for r in records if "meta" not in r and "summary" not in r]
        complete = any("summary" in r for r in records)
    keys = {}
    for row in rows:
        key = (json.dumps(row["problem"], sort_keys=True), row.get("impl") or row["variant"])
        keys[key] = row["status"]
    return keys, complete, len(rows)


def whole(path, fmt):
    """Whether a file parses whole: a torn write would leave half a document or half a line."""
    try:
        text = path.read_text()
        if fmt == "json":
            json.loads(text)
        else:
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
            if text and not text.endswith("\n"):
                return False
        return True
    except (ValueError, UnicodeDecodeError):
        return False


def soak(binary, tmp, fmt, generator, reference, longest_stop):
    folder = tmp / f"soak-{fmt}"
    folder.mkdir()
    out = folder / f"sweep.{fmt}"
    stops, torn, bad_exit = 0, [], []
    started = time.monotonic()
    while True:
        process = subprocess.Popen([binary, *SWEEP, "--format", fmt, "--out", str(out), "--resume"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        delay = generator.uniform(0.05, longest_stop)
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
            stops += 1
        _, stderr = process.communicate(timeout=120)
        # 143: stopped in order by its handler; -SIGTERM: killed before the sweep began (the handler
        # is installed once the device is open; before that nothing has been written).
        if process.returncode not in (0, 128 + signal.SIGTERM, -signal.SIGTERM):
            bad_exit.append(f"exit {process.returncode}: {stderr.strip()[:200]}")
        for path in folder.iterdir():
            if path.is_file() and not whole(path, fmt):
                torn.append(f"{path.name} after stop {stops}")
        if process.returncode == 0 or stops >= MAX_STOPS or bad_exit:
            break
    check(not bad_exit, f"{fmt}: every stop exits 0 or 143 or is killed before the sweep began ({bad_exit[:2]})")
    check(not torn, f"{fmt}: no file under --out torn after any of {stops} stops ({torn[:3]})")
    check(stops >= 3, f"{fmt}: stopped {stops} times before it finished (at least 3, or nothing was soaked)")
    check(process.returncode == 0, f"{fmt}: the sweep finished after {stops} stops, "
                                   f"{time.monotonic() - started:.0f} s")
    if process.returncode != 0:
        return
    result, complete, count = outcome(out, fmt)
    check(complete, f"{fmt}: the resumed result says it is complete")
    check(count == len(result), f"{fmt}: no configuration twice ({count} rows, {len(result)} distinct)")
    check(result == reference, f"{fmt}: configurations and statuses equal the uninterrupted run's "
                               f"({len(result)} against {len(reference)}; differing: "
                               f"{sorted(set(result.items()) ^ set(reference.items()))[:3]})")


def main():
    binary = sys.argv[1]
    seed = int(os.environ.get("SOAK_SEED", random.SystemRandom().randrange(2 ** 32)))
    print(f"SOAK_SEED={seed}")
    generator = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        whole_run = tmp / "uninterrupted.json"
        started = time.monotonic()
        result = subprocess.run([binary, *SWEEP, "--format", "json", "--out", str(whole_run)], capture_output=True,
                                text=True, timeout=300)
        elapsed = time.monotonic() - started
        check(result.returncode == 0, f"the uninterrupted sweep ({result.stderr.strip()[:200]})")
        if result.returncode != 0:
            return summary()
        reference, _, _ = outcome(whole_run, "json")
        statuses = set(reference.values())
        check({"ok", "skipped"} <= statuses, f"the sweep both runs and skips for memory ({sorted(statuses)})")
        # A configuration's rows are written together once its implementations' interleaved rounds
        # end, so a stop must sometimes come later than one configuration takes, or no run would
        # make progress: stops fall anywhere up to twice a run configuration's time on this machine
        # (a sanitizer build or a loaded CI machine is slower).
        ran = {configuration for (configuration, _), status in reference.items() if status == "ok"}
        longest_stop = max(0.6, 0.3 + 2 * elapsed / max(1, len(ran)))
        print(f"stops drawn from 0.05 to {longest_stop:.2f} s ({elapsed:.1f} s for {len(ran)} run configurations)")
        for fmt in ("json", "jsonl"):
            soak(binary, tmp, fmt, generator, reference, longest_stop)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
