#!/usr/bin/env python3
"""Bad input gets one clear line on stderr and exit code 2 (usage) or 1 (runtime); nothing is
half-written.

usage: tests/cli/cli_errors_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

failures = 0


def expect(args, code, needle, binary):
    global failures
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    ok = result.returncode == code and len(lines) == 1 and needle in result.stderr
    if not ok:
        failures += 1
    print(f"{'ok' if ok else 'FAIL'} {' '.join(args)!r}: exit {result.returncode}, stderr {result.stderr.strip()!r}")
    return result


def main():
    binary = sys.argv[1]
    checks = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        good = tmp / "good.npy"
        np.save(good, np.ones((1, 1, 4, 8), dtype=np.float32))
        (tmp / "bad.npy").write_bytes(b"not a numpy file at all")
        (tmp / "not-a-peak.json").write_text('{"peak": {"threads": 2}}')
        np.save(tmp / "int.npy", np.ones((1, 1, 4, 8), dtype=np.int32))
        np.save(tmp / "threed.npy", np.ones((1, 4, 8), dtype=np.float32))
        nan = np.ones((1, 1, 4, 8), dtype=np.float32)
        nan[0, 0, 2, 5] = np.nan
        np.save(tmp / "nan.npy", nan)
        cases = [
            (["run", "--seq", "0"], 2, "--seq"),
            (["model", "--cp", "0"], 2, "--cp 0"),
            (["model", "--cp", "-2"], 2, "--cp -2"),
            (["model", "--cp", "two"], 2, "--cp"),
            (["model", "--cp", "3", "--seq", "1024"], 2, "multiple of 3"),
            (["model", "--cp", "4", "--seq", "1028", "--causal"], 2, "multiple of 8"),
            (["model", "--cp", "2", "--preset", "seed-002"], 2, "--cp"),
            (["fit", "--cp", "0", "--budget", "1GiB"], 2, "--cp 0"),
            (["fit", "--cp", "-1", "--budget", "1GiB"], 2, "--cp -1"),
            (["fit", "--cp", "3", "--search", "batch", "--seq", "1000", "--budget", "1GiB"], 2, "multiple of 3"),
            (["fit", "--cp", "2", "--verify", "--budget", "1GiB"], 2, "--cp"),
            (["run", "--seq", "-5"], 2, "--seq"),
            (["run", "--seq", "abc"], 2, "--seq"),
            (["run", "--seq", "99999999999"], 2, "--seq"),
            (["run", "--heads", "0"], 2, "--heads"),
            (["run", "--head-dim", "300"], 2, "--head-dim"),
            (["run", "--variant", "v3"], 2, "v3"),
            (["run", "--format", "xml", "--seq", "8"], 2, "xml"),
            (["run", "--threads", "0"], 2, "--threads"),
            (["run", "--config", str(tmp / "missing.json")], 2, "missing.json"),
            (["run", "--mem-limit", "lots"], 2, "lots"),
            (["run", "--seq", "8", "--peak-file", str(tmp / "missing-peak.json")], 2, "missing-peak.json"),
            (["run", "--seq", "8", "--peak-file", str(tmp / "not-a-peak.json")], 2, "not-a-peak.json"),
            (["grad", "--q", str(tmp / "missing.npy"), "--k", str(good), "--v", str(good), "--do", str(good),
              "--out", str(tmp / "o1")], 2, "missing.npy"),
            (["grad", "--q", str(tmp / "bad.npy"), "--k", str(good), "--v", str(good), "--do", str(good),
              "--out", str(tmp / "o2")], 2, "bad.npy"),
            (["grad", "--q", str(tmp / "int.npy"), "--k", str(good), "--v", str(good), "--do", str(good),
              "--out", str(tmp / "o3")], 2, "int.npy"),
            (["grad", "--q", str(tmp / "threed.npy"), "--k", str(good), "--v", str(good), "--do", str(good),
              "--out", str(tmp / "o4")], 2, "threed.npy"),
            (["grad", "--variant", "flash", "--q", str(good), "--k", str(good), "--v", str(good), "--do", str(good),
              "--out", str(tmp / "o5")], 2, "flash"),
            # A NaN in an input is a runtime failure naming the tensor and its first index.
            (["grad", "--q", str(good), "--k", str(good), "--v", str(good), "--do", str(tmp / "nan.npy"),
              "--out", str(tmp / "o6")], 1, "--do"),
            (["grad", "--q", str(tmp / "nan.npy"), "--k", str(good), "--v", str(good), "--do", str(good),
              "--out", str(tmp / "o7")], 1, "[0, 0, 2, 5]"),
            (["bogus-command"], 2, "bogus"),
        ]
        for args, code, needle in cases:
            expect(args, code, needle, binary)
            checks += 1
        # Failed grad calls leave no output directory contents behind.
        for name in ("o1", "o2", "o3", "o4", "o5", "o6", "o7"):
            checks += 1
            leftovers = list((tmp / name).glob("*")) if (tmp / name).exists() else []
            if leftovers:
                global failures
                failures += 1
                print(f"FAIL {name} has leftovers {leftovers}")
        # A report that cannot be written fails at runtime (exit 1) and leaves no partial file.
        target = tmp / "no-such-dir" / "out.json"
        expect(["run", "--seq", "8", "--heads", "1", "--format", "json", "--out", str(target),
                "--min-samples", "5", "--max-time", "0.1"], 1, "no-such-dir", binary)
        checks += 1
        if target.exists():
            failures += 1
    print(f"{checks - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
