#!/usr/bin/env python3
"""What each row of `run` comes out as, tried on the real binary as a user would: a configuration
that cannot fit is skipped before anything is allocated, a variant alone is checked against float64
(or says `not checked`), a failure is a `failed` row while the sweep goes on (exit 1), --cold works
on the CPU, and the deep stack passes its float64 check. These are the six defects the one-harness
change fixed (this test was harness_defects_test.py); tests/harness/runner_test.cpp pins the same
outcomes with a fake device.

1. A configuration whose inputs alone do not fit is a `skipped` row decided before anything is
   allocated (the old CPU backend filled two host vectors with the inputs first and was killed, or
   ended the run with "out of memory").
2. A variant run alone is checked against float64 (the old CUDA backend recorded a check against
   "none" that counted as passed); with no reference possible the row says `not checked`.
3. A runtime failure in one implementation is a `failed` row with its reason, the sweep goes on,
   and the exit code is 1 (the old CUDA backend aborted the sweep).
4. --cold flushes the caches on the CPU too and the rows say so (the old CPU backend ignored it).
5. The deep-stack example of docs/usage.md passes its checks: every implementation against the float64
   stack by the naive-precision bar (the old check against `standard` with a fixed 1e-4 failed).
6. The CPU benchmark script never reconfigures the build the tests use: tests/scripts/bench_scripts_test.py.

With a GPU (flashbench info lists cuda as available), 2 and 3 also run on CUDA.

usage: tests/cli/row_outcomes_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def run(binary, args, env=None, limit_bytes=None, timeout=600):
    """flashbench run ARGS --format json into a temporary file: (exit code, rows, stderr)."""
    def limit_address_space():
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        result = subprocess.run([binary, "run", *args, "--format", "json", "--out", str(out)], capture_output=True,
                                text=True, timeout=timeout, env={**os.environ, **(env or {})},
                                preexec_fn=limit_address_space)
        rows = json.loads(out.read_text())["rows"] if out.exists() else []
    return result.returncode, rows, result.stderr


def cuda_available(binary):
    info = json.loads(subprocess.run([binary, "info", "--format", "json"], capture_output=True, text=True,
                                     check=True).stdout)
    return any(d["name"] == "cuda" and d["available"] for d in info.get("devices", []))


def main():
    binary = sys.argv[1]
    quick = ["--max-time", "0.1", "--min-samples", "5"]

    # 1. N = 300000, B = 4, H = 64: X0 and dO alone are 2 x 18.3 GiB. Under a 4 GiB address-space
    # limit, anything that allocates them first fails; the pre-flight must decide from the model.
    code, rows, err = run(binary, ["--seq", "256,300000", "--heads", "64", "--batch", "4", "--mem-limit", "2GiB",
                                   *quick], limit_bytes=4 << 30)
    check(code == 0, f"1: a sweep with a configuration that cannot fit exits 0 (got {code}: {err.strip()[-200:]})")
    big = [r for r in rows if r["problem"]["seq"] == 300000]
    small = [r for r in rows if r["problem"]["seq"] == 256]
    check(len(big) == 4 and all(r["status"] == "skipped" and "needs" in r["reason"] for r in big),
          "1: every variant at N = 300000 is a skipped row with the model's reason")
    check(all(r["memory"]["model"]["peak_bytes"] > 2 << 30 for r in big), "1: skipped rows carry the model's peak")
    check(len(small) == 4 and all(r["status"] == "ok" for r in small), "1: the configuration that fits runs")
    # v2 alone needs 110 GiB there: skipped on a 24 GiB machine (here pinned with --mem-limit, so that
    # a larger host gives the same answer).
    code, rows, err = run(binary, ["--seq", "300000", "--heads", "64", "--batch", "4", "--variant", "v2",
                                   "--mem-limit", "24GiB", *quick], limit_bytes=4 << 30)
    check(code == 0 and len(rows) == 1 and rows[0]["status"] == "skipped",
          f"1: v2 alone at N = 300000 is a skipped row, exit 0 (got {code}, {[r['status'] for r in rows]})")

    backends = ["cpu"] + (["cuda"] if cuda_available(binary) else [])
    for backend in backends:
        dtype = ["--dtype", "bf16"] if backend == "cuda" else []
        # 2. One variant alone: a real comparison, against float64.
        code, rows, _ = run(binary, ["--backend", backend, "--seq", "200", "--heads", "2", "--variant", "v2", *dtype,
                                     *quick])
        check(code == 0 and rows and rows[0]["check"] and rows[0]["check"]["reference"] == "float64"
              and rows[0]["check"]["passed"], f"2 {backend}: v2 alone is checked against float64 and passes")
        # ... and where no reference is possible (a deep stack over the reference's budget), the row says
        # `not checked` instead of passing.
        code, rows, _ = run(binary, ["--backend", backend, "--seq", "200", "--heads", "2", "--layers", "2",
                                     "--variant", "v2", "--check-budget", "0", *dtype, *quick])
        check(code == 0 and rows and rows[0]["check"] is None and "budget" in rows[0].get("not_checked", ""),
              f"2 {backend}: over the reference's budget the row is not checked, and says why")
        # 3. A failure inside one implementation: a failed row with its reason, the others still run.
        code, rows, _ = run(binary, ["--backend", backend, "--seq", "128", "--heads", "2", "--variant", "standard,v1,v2",
                                     *dtype, *quick], env={"FLASHBENCH_INJECT_FAILURE": "v1"})
        statuses = [r["status"] for r in rows]
        check(code == 1, f"3 {backend}: a failed row makes the exit code 1 (got {code})")
        check(statuses == ["ok", "failed", "ok"], f"3 {backend}: failed row between two that ran (got {statuses})")
        check(len(rows) == 3 and "injected failure" in rows[1]["reason"], f"3 {backend}: the failed row says why")

    # 4. --cold on the CPU: accepted, rows record it, results still checked.
    code, rows, _ = run(binary, ["--seq", "256", "--heads", "2", "--variant", "standard,v2", "--cold", *quick])
    check(code == 0 and len(rows) == 2 and all(r["cold"] and r["status"] == "ok" for r in rows),
          "4: --cold runs on the CPU and every row records it")
    code, rows, _ = run(binary, ["--seq", "256", "--heads", "2", "--variant", "v2", *quick])
    check(rows and rows[0]["cold"] is False, "4: without --cold the rows say warm")

    # 5. docs/usage.md's example, scaled to N = 1024, H = 2 (the defect showed there too): L = 4 and L = 8.
    for layers in ("4", "8"):
        code, rows, err = run(binary, ["--seq", "1024", "--heads", "2", "--variant", "v2,standard", "--threads", "1",
                                       "--layers", layers, "--mem-limit", "8GiB", *quick])
        check(code == 0, f"5: L = {layers} exits 0 (got {code}: {err.strip()[-200:]})")
        for r in rows:
            c = r["check"] or {}
            check(c.get("reference") == "float64" and c.get("passed"),
                  f"5: L = {layers} {r['impl']} against float64: {c.get('max_rel_err', 0):.2e} <= "
                  f"{c.get('tolerance', 0):.2e} (naive fp32 {c.get('naive_rel_err', 0):.2e})")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
