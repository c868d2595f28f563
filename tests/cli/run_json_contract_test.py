#!/usr/bin/env python3
"""`flashbench run --format json` follows the JSON contract (docs/json.md), and its numbers hang
together: the tag split adds up to the peak, every variant is checked against float64, the model
matches.

usage: tests/cli/run_json_contract_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TAGS = ("input", "activation", "kept", "workspace", "grad")
TIMING = ("median_ms", "mean_ms", "stddev_ms", "min_ms", "max_ms", "samples_ms")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([binary, "run", "--seq", "33,70", "--heads", "2", "--batch", "2", "--head-dim", "24",
                        "--layers", "1,2", "--causal", "--format", "json", "--out", str(out),
                        "--max-time", "0.2"], check=True)
        document = json.loads(out.read_text())
    check(document.get("schema_version") == 1, "schema_version is 1")
    meta = document.get("meta", {})
    for key in ("tool", "version", "git", "argv", "build", "host", "time"):
        check(key in meta, f"meta has {key}")
    rows = document.get("rows", [])
    check(len(rows) == 16, f"16 rows (4 problems x 4 variants), got {len(rows)}")
    for row in rows:
        name = f"{row.get('variant')} N={row.get('problem', {}).get('seq')}"
        for key in ("backend", "variant", "problem", "status", "timing", "throughput", "memory"):
            check(key in row, f"{name}: has {key}")
        problem = row["problem"]
        check(row.get("impl") == row["variant"], f"{name}: impl is the variant's default")
        for key in ("batch", "heads", "seq", "head_dim", "layers", "causal", "dtype"):
            check(key in problem, f"{name}: problem.{key}")
        check(row["status"] == "ok", f"{name}: status ok")
        for phase in ("fwd", "bwd"):
            timing = row["timing"][phase]
            check(all(k in timing for k in TIMING), f"{name}: timing.{phase} keys")
            check(len(timing["samples_ms"]) >= 5, f"{name}: at least 5 {phase} samples")
            check(timing["min_ms"] <= timing["median_ms"] <= timing["max_ms"], f"{name}: {phase} min <= median <= max")
        check(row["throughput"]["fwd_tflops"] > 0 and row["throughput"]["bwd_tflops"] > 0, f"{name}: throughput")
        measured, model = row["memory"]["measured"], row["memory"]["model"]
        check(sum(measured["by_tag"][t] for t in TAGS) == measured["peak_bytes"], f"{name}: measured tags add up")
        check(sum(model["by_tag"][t] for t in TAGS) == model["peak_bytes"], f"{name}: model tags add up")
        check(measured["peak_phase"] in ("fwd", "bwd"), f"{name}: peak_phase")
        check(abs(model["peak_bytes"] - measured["peak_bytes"]) <= 0.01 * measured["peak_bytes"],
              f"{name}: model peak within 1% of measured")
        check(model["kept_bytes"] == measured["kept_bytes"], f"{name}: kept bytes agree")
        # Every implementation, at every depth, against the float64 stack, by the naive-precision bar.
        check(row.get("check") is not None and row["check"]["reference"] == "float64", f"{name}: checked against float64")
        if row.get("check"):
            c = row["check"]
            check(c["passed"] and c["max_rel_err"] <= c["tolerance"], f"{name}: max_rel_err {c['max_rel_err']:.1e}")
            check(c.get("naive_rel_err", 0) > 0, f"{name}: the naive error the bar is made of")
            # Each compared tensor of layer 0 apart, the largest of them the row's; nothing left out.
            tensors = c.get("tensors", {})
            check(list(tensors) == ["O", "dQ", "dK", "dV"], f"{name}: check.tensors names O, dQ, dK and dV")
            check(c.get("not_compared", "") == "", f"{name}: every tensor compared")
            check(max(t["rel_err"] for t in tensors.values()) == c["max_rel_err"], f"{name}: max_rel_err is the largest")
            check(max(t["naive_rel_err"] for t in tensors.values()) == c["naive_rel_err"],
                  f"{name}: naive_rel_err is the largest")
            check(c["max_rel_err"] < 1e-5, f"{name}: fp32 within 1e-5 of float64")
    # --peak: the ceilings measured first go into meta.cpu_peak, and every timed row's rates are read
    # against the sgemm ceiling; --peak-file takes them from `info --peak --format json` instead.
    with tempfile.TemporaryDirectory() as tmp:
        peak_file = Path(tmp) / "peak.json"
        with open(peak_file, "w") as f:
            subprocess.run([binary, "info", "--peak", "--peak-size", "256", "--format", "json"], check=True, stdout=f)
        for how in (["--peak"], ["--peak-file", str(peak_file)]):
            out = Path(tmp) / "peak-run.json"
            subprocess.run([binary, "run", "--seq", "128", "--heads", "2", "--variant", "standard,v2", *how,
                            "--format", "json", "--out", str(out), "--max-time", "0.1"], check=True)
            document = json.loads(out.read_text())
            ceiling = document["meta"].get("cpu_peak", {})
            name = " ".join(how[:1])
            check(ceiling.get("sgemm_ceiling_gflops", 0) > 0, f"{name}: meta.cpu_peak has the sgemm ceiling")
            check(ceiling.get("sgemm_ceiling_gflops", 0) >= ceiling.get("sgemm_gflops", 1e30),
                  f"{name}: the ceiling is the faster sgemm")
            for row in document["rows"]:
                t = row["throughput"]
                check(t.get("peak_gflops") == ceiling.get("sgemm_ceiling_gflops"), f"{name} {row['variant']}: row ceiling")
                for phase in ("fwd", "bwd"):
                    expected = t[f"{phase}_tflops"] * 1e3 / t["peak_gflops"]
                    check(abs(t[f"{phase}_of_peak"] - expected) < 1e-9 * expected,
                          f"{name} {row['variant']}: {phase}_of_peak = rate / ceiling ({t[f'{phase}_of_peak']:.2f})")
    # A configuration whose modelled peak does not fit the budget is a skipped row with the model's
    # numbers and the reason; the sweep goes on and exits 0.
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "skip.json"
        subprocess.run([binary, "run", "--seq", "64,2048", "--heads", "2", "--mem-limit", "20MiB",
                        "--format", "json", "--out", str(out), "--max-time", "0.1"], check=True)
        rows = json.loads(out.read_text())["rows"]
    for row in rows:
        big = row["problem"]["seq"] == 2048
        name = f"mem-limit {row['variant']} N={row['problem']['seq']}"
        if big and row["variant"] != "v2":
            check(row["status"] == "skipped" and "available" in row.get("reason", ""), f"{name}: skipped with a reason")
            check(row["memory"]["model"]["peak_bytes"] > 20 << 20, f"{name}: carries the model's peak")
        else:
            check(row["status"] == "ok", f"{name}: runs")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
