#!/usr/bin/env python3
"""`run`'s options that shape how it runs rather than what (this test was run_habits_test.py):
--tokens (B = T / N per configuration), --dry-run (the same configurations, implementations and
skipped rows, for the same reasons, as the real run), --progress (on stderr, only when asked or on a
terminal) and --profile (one warm-up, one sample).

usage: tests/cli/run_options_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

QUICK = ["--max-time", "0.02", "--warmup-time", "0"]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402
from terminal import run_on_terminal  # noqa: E402


def flashbench(binary, *args, timeout=300):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)


def usage_error(binary, args, words, what):
    done = flashbench(binary, *args)
    lines = done.stderr.strip().splitlines()
    check(done.returncode == 2 and len(lines) == 1 and all(w in done.stderr for w in words),
          f"{what}: exit {done.returncode}, {done.stderr.strip()!r}")


def tokens(binary, tmp):
    out = tmp / "tokens.json"
    done = flashbench(binary, "run", "--seq", "64,128,256", "--tokens", "512", "--heads", "1", "--variant", "v2",
                      *QUICK, "--format", "json", "--out", str(out))
    check(done.returncode == 0, f"--tokens 512 runs (exit {done.returncode} {done.stderr.strip()[-200:]!r})")
    if done.returncode != 0:
        return
    document = json.loads(out.read_text())
    shapes = [(r["problem"]["batch"], r["problem"]["seq"]) for r in document["rows"]]
    check(shapes == [(8, 64), (4, 128), (2, 256)], f"B = T / N per configuration: {shapes}")
    spec = document["meta"]["sweep"]["spec"]
    check(spec.get("tokens") == [512] and "batch" not in spec, f"meta.sweep.spec records tokens, not batch: {spec}")
    # The recorded sweep is a sweep file that runs again (`run --config`).
    sweep_file = tmp / "tokens-sweep.json"
    sweep_file.write_text(json.dumps(spec))
    again = flashbench(binary, "run", "--config", str(sweep_file), "--dry-run", "--format", "json")
    planned = [(c["problem"]["batch"], c["problem"]["seq"]) for c in json.loads(again.stdout)["configurations"]] \
        if again.returncode == 0 else []
    check(planned == shapes, f"its meta.sweep.spec read back by --config plans the same: {planned}")

    usage_error(binary, ["run", "--seq", "64", "--tokens", "512", "--batch", "2"], ["--batch", "--tokens"],
                "--tokens with --batch")
    usage_error(binary, ["run", "--seq", "64,100", "--tokens", "512"], ["--tokens 512", "N = 100"],
                "a T that N does not divide")
    usage_error(binary, ["run", "--seq", "1024", "--tokens", "512"], ["--tokens 512", "N = 1024"], "T below N")
    usage_error(binary, ["model", "--seq", "4096", "--tokens", "16384", "--batch", "2"], ["--tokens", "--batch"],
                "model --tokens with --batch")
    usage_error(binary, ["model", "--seq", "3000", "--tokens", "16384"], ["N = 3000"], "model: T that N does not divide")
    model = flashbench(binary, "model", "--seq", "4096", "--tokens", "16384", "--heads", "2")
    same = flashbench(binary, "model", "--seq", "4096", "--batch", "4", "--heads", "2")
    check(model.returncode == 0 and "B=4" in model.stdout and model.stdout == same.stdout,
          "model --tokens 16384 --seq 4096 is model --batch 4")


def row_key(problem, impl):
    return json.dumps(problem, sort_keys=True), impl


def dry_run_matches_run(binary, tmp):
    # 3 N at 512 tokens x (fp32, bf16) x (no dropout, 0.1): bf16 with dropout is unsupported on the CPU;
    # a memory limit between the smallest and the largest modelled peak skips the larger ones.
    sweep = ["--seq", "64,128,256", "--tokens", "512", "--heads", "2", "--dtype", "fp32,bf16", "--dropout", "0,0.1"]
    unlimited = flashbench(binary, "run", *sweep, "--dry-run", "--format", "json")
    check(unlimited.returncode == 0, f"--dry-run --format json (exit {unlimited.returncode} {unlimited.stderr.strip()!r})")
    if unlimited.returncode != 0:
        return
    peaks = sorted(r["model_peak_bytes"] for c in json.loads(unlimited.stdout)["configurations"] for r in c["rows"]
                   if r["model_peak_bytes"] is not None)
    limit = str(peaks[len(peaks) // 2])
    planned = flashbench(binary, "run", *sweep, "--mem-limit", limit, "--dry-run", "--format", "json")
    plan = json.loads(planned.stdout)
    out = tmp / "real.json"
    real = flashbench(binary, "run", *sweep, "--mem-limit", limit, *QUICK, "--format", "json", "--out", str(out))
    check(real.returncode == 0, f"the real run (exit {real.returncode})")
    if real.returncode != 0:
        return
    rows = json.loads(out.read_text())["rows"]
    planned_rows = {row_key(c["problem"], r["impl"]): (r["status"], r["reason"]) for c in plan["configurations"]
                    for r in c["rows"]}
    real_rows = {row_key(r["problem"], r["impl"]): ("skipped" if r["status"] == "skipped" else "run",
                                                     r["reason"] if r["status"] == "skipped" else None) for r in rows}
    check(len(planned_rows) == 48 and planned_rows.keys() == real_rows.keys(),
          f"the same 48 (configuration, implementation) pairs: {len(planned_rows)} planned, {len(real_rows)} run")
    check(planned_rows == real_rows, "the same rows skipped, for the same reasons, and the same run")
    reasons = [reason for status, reason in planned_rows.values() if status == "skipped"]
    check(any("16-bit" in r for r in reasons) and any("available" in r for r in reasons)
          and any(status == "run" for status, _ in planned_rows.values()),
          f"both kinds of skip are there (unsupported, memory) beside rows that run: {sorted(set(reasons))}")
    order = [row_key(r["problem"], r["impl"]) for r in rows]
    planned_order = [row_key(c["problem"], r["impl"]) for c in plan["configurations"] for r in c["rows"]]
    check(order == planned_order, "in the same order")
    check(plan["modelled_seconds"] > 0 and all(c["modelled_seconds"] >= 0 for c in plan["configurations"]),
          f"a modelled time: {plan['modelled_seconds']:.2f} s")
    # The table form: a line per configuration, one per implementation, the total.
    table = flashbench(binary, "run", *sweep, "--mem-limit", limit, "--dry-run")
    lines = table.stdout.splitlines()
    configurations = [l for l in lines if l.startswith("[")]
    skipped = [l for l in lines if "skipped: " in l]
    check(table.returncode == 0 and len(configurations) == 12 and len(skipped) == len(reasons)
          and any("estimated time" in l for l in lines) and any("modelled time" in l for l in lines[-3:]),
          f"the table: 12 configurations, {len(skipped)} skipped, the estimated and the modelled total")
    probe = plan["probe"]
    check(probe is not None and probe["failed"] is None and "GFLOP/s" in probe["learned"]
          and plan["estimated_seconds"] > 0 and any("learned in" in l for l in lines),
          f"the estimate is learned from a probe: {probe}")
    # Nothing written: --out names a file the dry run must not create.
    never = tmp / "never.json"
    written = flashbench(binary, "run", "--seq", "64", "--dry-run", "--out", str(never), "--export-csv",
                         str(tmp / "never.csv"))
    check(written.returncode == 0 and not never.exists() and not (tmp / "never.csv").exists(),
          "--dry-run writes neither --out nor an export")
    usage_error(binary, ["run", "--seq", "64", "--dry-run", "--format", "csv"], ["--dry-run"], "--dry-run --format csv")


def progress(binary):
    # Five samples exactly and no warm-up time: each row's modelled time is then 7 passes, its FLOP at
    # the nominal rate (--max-time would otherwise bound both configurations alike).
    args = ["run", "--seq", "64,128", "--heads", "1", "--variant", "v2,standard", "--warmup-time", "0",
            "--max-samples", "5"]
    forced = flashbench(binary, *args, "--progress")
    lines = [l for l in forced.stderr.splitlines() if l.startswith("progress: ")]
    check(forced.returncode == 0 and len(lines) == 4, f"--progress: a line per implementation ({len(lines)}): {lines}")
    percents = [float(l.split("] ")[1].split("%")[0]) for l in lines]
    check(percents == sorted(percents) and percents[0] == 0 and percents[-1] < 100, f"work done grows: {percents}")
    check(all(" ETA " in l for l in lines[2:]) and not any(" ETA " in l for l in lines[:2]),
          "an ETA once a configuration has finished, learned from it; none before")
    check(["v2" in lines[0], "standard" in lines[1]] == [True, True], "names the implementation")
    # Before anything finished, the share done is the modelled work's: N = 128 costs 4x N = 64 (FLOP grow
    # as N^2 at one B), so the second implementation of the first configuration starts at 1/10 of it.
    check(abs(percents[1] - 10) < 0.5, f"weighted by FLOP: the second row starts at {percents[1]}% (want 10)")
    quiet = flashbench(binary, *args)
    check(quiet.returncode == 0 and "progress" not in quiet.stderr and "\r" not in quiet.stderr,
          f"no progress into a pipe unasked: {quiet.stderr!r}")
    check("progress" not in forced.stdout and "\r" not in forced.stdout and "B=1 H=1 N=128" in forced.stdout,
          "stdout holds the table alone")


def progress_on_a_terminal(binary):
    # stderr a terminal (a pseudo-terminal here): the line rewritten in place, cleared at the end.
    code, text, _ = run_on_terminal([binary, "run", "--seq", "64,96", "--heads", "1", "--variant", "v2", *QUICK],
                                    stdout_too=False)
    check(code == 0 and text.count("\r\x1b[K[") == 2 and "progress: " not in text
          and text.endswith("\r\x1b[K"), f"on a terminal: one line rewritten in place, cleared at the end: {text!r}")


def profile(binary, tmp):
    out = tmp / "profile.json"
    done = flashbench(binary, "run", "--seq", "64", "--heads", "1", "--variant", "v2,standard", "--profile",
                      "--format", "json", "--out", str(out))
    check(done.returncode == 0, f"--profile runs (exit {done.returncode} {done.stderr.strip()!r})")
    if done.returncode == 0:
        rows = json.loads(out.read_text())["rows"]
        counts = [(r["timing"]["fwd"]["count"], r["timing"]["bwd"]["count"]) for r in rows]
        check(counts == [(1, 1), (1, 1)], f"one sample per phase: {counts}")
        check(all(r["check"] is not None and r["status"] == "ok" for r in rows), "still checked")
        noisy = [w for r in rows for w in r.get("warnings", []) if "noise" in w]
        check(not noisy, f"no noise warning for the one sample it takes by design: {noisy}")
    table = flashbench(binary, "run", "--seq", "64", "--heads", "1", "--variant", "v2", "--profile")
    check(table.returncode == 0 and "noise" not in table.stdout + table.stderr,
          f"--profile's table advises nothing about noise: {(table.stdout + table.stderr)[-300:]!r}")
    usage_error(binary, ["run", "--seq", "64", "--profile", "--min-samples", "9"], ["--profile"],
                "--profile with a sampling flag")


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tokens(binary, tmp)
        dry_run_matches_run(binary, tmp)
        progress(binary)
        progress_on_a_terminal(binary)
        profile(binary, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
