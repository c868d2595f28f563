#!/usr/bin/env python3
"""How long a run takes is said before it runs and while it runs, within 25 %: `run --dry-run`'s
estimate (learned from a probe on this machine) and the live ETA (learned from the configurations
already finished) against the measured wall time of the same command. The commands are the
README's first two `run` examples (docs/usage.md), scaled so that each takes seconds here: one
configuration (`run --seq 4096`), and a sweep whose N doubles (`run --seq 512:4096:x2`), where the
small configurations stop on the noise target and the large ones on --max-time.

A timing test: CTest runs it alone (RUN_SERIAL), and since another process can take the machine for a
while, a miss is measured again, up to three times, before it fails.

usage: tests/cli/time_estimate_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402

TOLERANCE = 0.25
EXAMPLES = {
    "flashbench run --seq 4096": ["--seq", "2048", "--heads", "8", "--max-time", "1"],
    "flashbench run --seq 512:4096:x2": ["--seq", "256:2048:x2", "--heads", "4", "--max-time", "0.5"],
}


def estimated(binary, args):
    done = subprocess.run([binary, "run", *args, "--dry-run", "--format", "json"], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        return None, f"--dry-run failed: {done.stderr.strip()[-200:]}"
    plan = json.loads(done.stdout)
    return plan["estimated_seconds"], plan["probe"]["learned"]


def measured(binary, args):
    """The run's wall time, and each ETA it printed with the time left when it printed it [s]."""
    started = time.monotonic()
    process = subprocess.Popen([binary, "run", *args, "--progress"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    etas = []  # (seconds the line promised, when it came), for the first implementation of a configuration
    for line in process.stderr:
        if line.startswith("progress: ") and " ETA " in line and line.startswith("progress: [") and "] " in line:
            configuration = line.split("]")[0]
            if not etas or etas[-1][2] != configuration:
                etas.append((parse_eta(line.rsplit(" ETA ", 1)[1].strip()), time.monotonic(), configuration))
    process.wait(timeout=300)
    ended = time.monotonic()
    return process.returncode, ended - started, [(promised, ended - at) for promised, at, _ in etas]


def parse_eta(text):
    """"4s", "2m05s", "1h02m" -> seconds."""
    if "h" in text:
        hours, minutes = text.rstrip("m").split("h")
        return int(hours) * 3600 + int(minutes) * 60
    if "m" in text:
        minutes, seconds = text.rstrip("s").split("m")
        return int(minutes) * 60 + int(seconds)
    return int(text.rstrip("s"))


def within(estimate, real):
    return real > 0 and abs(estimate / real - 1) <= TOLERANCE


def one_example(binary, readme, args):
    for attempt in (1, 2, 3):
        estimate, learned = estimated(binary, args)
        if estimate is None:
            check(False, f"{readme}: {learned}")
            return
        code, real, etas = measured(binary, args)
        # The first ETA is learned from the first configuration alone, 1/64 of the last one's work,
        # whose many short samples say little of the long ones (it may be 1.5x off); from the third
        # configuration on it knows one a quarter of the last one's size. A promise of a few seconds is
        # judged in whole seconds, as it is printed.
        first = etas[1] if len(etas) > 1 else None
        eta_ok = first is None or abs(first[0] - first[1]) <= max(1.5, TOLERANCE * first[1])
        if code == 0 and within(estimate, real) and eta_ok:
            break
        if attempt < 3:
            print(f"note: {readme}: estimated {estimate:.1f} s, measured {real:.1f} s, first ETA {first}; once more")
    check(code == 0, f"{readme} (scaled: {' '.join(args)}) runs (exit {code})")
    check(within(estimate, real),
          f"{readme}: --dry-run estimated {estimate:.1f} s, the run took {real:.1f} s "
          f"({estimate / real:.2f}x; learned {learned})")
    if len(args) > 2 and ":" in args[1]:  # a sweep: an ETA once its first configuration is done
        check(len(etas) == 3 and eta_ok,
              f"{readme}: an ETA from the second configuration on ({len(etas)}); the one at the third promised "
              f"{first[0] if first else None} s, {first[1] if first else 0:.1f} s were left (all: {etas})")
    else:  # one configuration: nothing is learned before it ends, so no ETA is promised
        check(not etas, f"{readme}: no ETA for a single configuration ({etas})")


def main():
    binary = sys.argv[1]
    for readme, args in EXAMPLES.items():
        one_example(binary, readme, args)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
