#!/usr/bin/env python3
"""`run --shard`, `run --resume` and `merge` from the command line: shards of a sweep are disjoint,
cover it, and merge back to the rows of one process in its order; `--shard auto` reads a job array's
index; a sweep stopped by a signal (json, jsonl) or killed in the middle of a line is finished by
--resume without a configuration twice; --resume and merge refuse files of another sweep or shard
(exit 2, one line, nothing written); merge names what is missing and the --array= indices (exit 1).

usage: tests/cli/shard_resume_merge_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

BINARY = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/flashbench"
# 8 configurations, 2 implementations each, a few ms a configuration.
SWEEP = ["--seq", "32:128:+32", "--heads", "1", "--head-dim", "16", "--mask", "both", "--variant", "standard,v2",
         "--threads", "1", "--max-time", "0.01", "--min-samples", "5", "--warmup-time", "1"]
# The same sweep, slow enough to stop by a signal: every implementation warms up for 0.15 s (the
# warm-up time is a floor, where a sampling time or noise target can be met early by fast kernels).
SLOW = [*SWEEP[:SWEEP.index("--warmup-time")], "--warmup-time", "150"]
def catches(pid, sig):
    """Whether process `pid` has a handler for `sig` installed."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0)
    return bool(caught >> (sig - 1) & 1)


CLEAN_ENV = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "JOB_COMPLETION_INDEX", "FLASHBENCH_SHARD_COUNT"))}


def flashbench(*arguments, env=None):
    return subprocess.run([BINARY, *arguments], capture_output=True, text=True, timeout=120,
                          env=dict(CLEAN_ENV, **(env or {})))


def rows_of(path):
    """The rows of a .json or .jsonl file as (implementation, configuration, status)."""
    text = Path(path).read_text()
    if str(path).endswith(".jsonl"):
        rows = [json.loads(line) for line in text.splitlines() if line.startswith('{"backend"')]
    else:
        rows = json.loads(text)["rows"]
    return [(r["impl"], json.dumps(r["problem"], sort_keys=True), r["status"]) for r in rows]


def meta_of(path):
    text = Path(path).read_text()
    return json.loads(text.splitlines()[0] if str(path).endswith(".jsonl") else text)["meta"]


class ShardResumeMergeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls.tmp.name)
        cls.whole = cls.dir / "whole.json"
        result = flashbench("run", *SWEEP, "--format", "json", "--out", str(cls.whole))
        assert result.returncode == 0, result.stderr
        cls.shards = []
        for index in range(3):
            path = cls.dir / f"shard-{index}.jsonl"
            result = flashbench("run", *SWEEP, "--shard", f"{index}/3", "--format", "jsonl", "--out", str(path))
            assert result.returncode == 0, result.stderr
            cls.shards.append(path)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_usage_error(self, result, *fragments):
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, result.stderr)

    # --shard

    def test_shards_are_disjoint_and_merge_to_one_process_run(self):
        whole = rows_of(self.whole)
        seen = [rows_of(path) for path in self.shards]
        self.assertEqual(sorted(r for rows in seen for r in rows), sorted(whole))
        self.assertTrue(all(rows for rows in seen), "every shard got configurations")
        metas = [meta_of(path) for path in self.shards]
        self.assertEqual(len({m["sweep"]["hash"] for m in metas}), 1)
        self.assertEqual([m["sweep"]["shard"]["index"] for m in metas], [0, 1, 2])
        self.assertEqual(meta_of(self.whole)["sweep"]["hash"], metas[0]["sweep"]["hash"])  # 1 shard: the same sweep
        merged = self.dir / "merged.json"
        result = flashbench("merge", *map(str, reversed(self.shards)), "--out", str(merged))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines()[0], f"16 rows from 3 files -> {merged}")
        self.assertEqual(rows_of(merged), whole)  # in the sweep's order, whatever the order of the files
        document = json.loads(merged.read_text())
        self.assertTrue(document["meta"]["complete"])
        self.assertIn("summary", document)

    def test_shard_auto_reads_the_job_array(self):
        out = self.dir / "auto.jsonl"
        slurm = {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0",
                 "SLURM_ARRAY_TASK_MAX": "2"}
        result = flashbench("run", *SWEEP, "--shard", "auto", "--format", "jsonl", "--out", str(out), env=slurm)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(rows_of(out), rows_of(self.shards[2]))
        self.assertEqual(meta_of(out)["sweep"]["shard"], {"index": 2, "count": 3, "from": "SLURM_ARRAY_TASK_ID"})
        # A resubmitted --array=2 is an array of one: its size is not the sweep's shard count.
        rerun = dict(slurm, SLURM_ARRAY_TASK_COUNT="1", SLURM_ARRAY_TASK_MIN="2")
        self.assert_usage_error(flashbench("run", *SWEEP, "--shard", "auto", env=rerun), "--shard auto/N")
        result = flashbench("run", *SWEEP, "--shard", "auto", "--format", "jsonl", "--out", str(out),
                            env=dict(rerun, FLASHBENCH_SHARD_COUNT="3"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(rows_of(out), rows_of(self.shards[2]))
        k8s = flashbench("run", *SWEEP, "--shard", "auto/3", "--format", "jsonl", "--out", str(out),
                         env={"JOB_COMPLETION_INDEX": "1"})
        self.assertEqual(k8s.returncode, 0, k8s.stderr)
        self.assertEqual(rows_of(out), rows_of(self.shards[1]))

    def test_bad_shards_and_device_indices_are_usage_errors(self):
        self.assert_usage_error(flashbench("run", *SWEEP, "--shard", "3/3"), "index 3 is not below the shard count 3")
        self.assert_usage_error(flashbench("run", *SWEEP, "--shard", "auto"), "SLURM_ARRAY_TASK_ID")
        self.assert_usage_error(flashbench("run", *SWEEP, "--device-index", "1"), "the cpu backend is one device")
        self.assert_usage_error(flashbench("run", *SWEEP, "--device-index", "-1"), "--device-index must be 0 or more")

    # --resume

    def stop_midway(self, out, fmt, sig, extra=()):
        process = subprocess.Popen([BINARY, "run", *SLOW, *extra, "--format", fmt, "--out", str(out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=CLEAN_ENV)
        deadline = time.monotonic() + 60
        handled = False
        while time.monotonic() < deadline and process.poll() is None:
            # Once the sweep catches the signal (its SigCgt mask in /proc: a process still starting on
            # a loaded machine would meet the default action) and, for jsonl, a configuration is written.
            handled = handled or catches(process.pid, sig)
            if handled and (fmt == "json" or (out.exists() and len(rows_of(out)) >= 2)):
                break
            time.sleep(0.02)
        process.send_signal(sig)
        _, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 128 + sig, err)

    def test_resume_finishes_a_jsonl_stopped_by_sigterm(self):
        out = self.dir / "stopped.jsonl"
        self.stop_midway(out, "jsonl", signal.SIGTERM)
        before = rows_of(out)
        self.assertTrue(0 < len(before) < 16, before)
        result = flashbench("run", *SLOW, "--format", "jsonl", "--out", str(out), "--resume")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"{len(before) // 2} of 8 configurations already there", result.stderr)
        after = rows_of(out)
        self.assertEqual(after[:len(before)], before)  # the earlier rows as they were, first
        self.assertEqual(sorted(r[:2] for r in after), sorted(r[:2] for r in rows_of(self.whole)))
        self.assertEqual(len(meta_of(out)["resumed_from"]), 1)
        self.assertEqual(list(self.dir.glob(".stopped.jsonl.*")), [])  # no temporary file left

    def test_resume_finishes_a_json_stopped_by_sigint(self):
        out = self.dir / "stopped.json"
        self.stop_midway(out, "json", signal.SIGINT)
        meta = meta_of(out)
        self.assertFalse(meta["complete"])
        self.assertTrue(meta["not_run"])
        result = flashbench("run", *SLOW, "--format", "json", "--out", str(out), "--resume")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(meta_of(out)["complete"])
        self.assertEqual(sorted(r[:2] for r in rows_of(out)), sorted(r[:2] for r in rows_of(self.whole)))

    def test_resume_reruns_a_configuration_cut_short(self):
        out = self.dir / "cut.jsonl"
        text = self.shards[0].read_text().splitlines(keepends=True)
        rows = [i for i, line in enumerate(text) if line.startswith('{"backend"')]
        # Killed while writing the second row of the last configuration: half a line, no newline.
        out.write_text("".join(text[:rows[-1]]) + text[rows[-1]][:40])
        merge_warning = flashbench("merge", str(out), "--out", str(self.dir / "cut-merged.json"))
        self.assertIn("cut short", merge_warning.stderr)
        result = flashbench("run", *SWEEP, "--shard", "0/3", "--format", "jsonl", "--out", str(out), "--resume")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("cut short", result.stderr)
        self.assertEqual([r[:2] for r in rows_of(out)], [r[:2] for r in rows_of(self.shards[0])])

    def test_resume_of_nothing_runs_everything(self):
        out = self.dir / "fresh.jsonl"
        result = flashbench("run", *SWEEP, "--shard", "1/3", "--format", "jsonl", "--out", str(out), "--resume")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([r[:2] for r in rows_of(out)], [r[:2] for r in rows_of(self.shards[1])])
        self.assertNotIn("resumed_from", meta_of(out))

    def test_resume_refuses_another_sweep_or_shard(self):
        target = self.dir / "keep.jsonl"
        target.write_bytes(self.shards[0].read_bytes())
        before = target.read_bytes()
        other_sweep = [a if a != "32:128:+32" else "32:160:+32" for a in SWEEP]
        for arguments, fragment in ((other_sweep + ["--shard", "0/3"], "holds shard 0/3 of sweep"),
                                    (SWEEP + ["--shard", "1/3"], "this run is shard 1/3"),
                                    (SWEEP, "this run is shard 0/1")):
            self.assert_usage_error(flashbench("run", *arguments, "--format", "jsonl", "--out", str(target),
                                               "--resume"), fragment, "not resuming into it")
            self.assertEqual(target.read_bytes(), before)
        for arguments in (["--format", "table", "--out", str(self.dir / "t.txt")],
                          ["--format", "jsonl", "--out", str(self.dir / "t.json")], ["--format", "json"]):
            self.assert_usage_error(flashbench("run", *SWEEP, *arguments, "--resume"), "--resume reads --out back")

    # merge

    def test_merge_names_missing_shards_and_the_array_to_rerun(self):
        merged = self.dir / "partial.json"
        empty = self.dir / "shard-crashed.jsonl"
        empty.write_text("")
        result = flashbench("merge", str(self.shards[0]), str(empty), "--out", str(merged))
        self.assertEqual(result.returncode, 1, result.stderr)
        lines = result.stdout.splitlines()
        missing = len(rows_of(self.shards[1]) + rows_of(self.shards[2])) // 2
        self.assertEqual(lines[1], f"{missing} configurations missing:")
        self.assertEqual(lines[-1], "rerun them: --array=1,2")
        self.assertTrue(all(line.startswith(("  shard 1: B=", "  shard 2: B=")) for line in lines[2:-1]), lines)
        document = json.loads(merged.read_text())
        self.assertFalse(document["meta"]["complete"])
        self.assertEqual(len(document["meta"]["not_run"]), missing)

    def test_merge_refusals_write_nothing(self):
        other = self.dir / "other-sweep.jsonl"
        other_sweep = [a if a != "32:128:+32" else "32:96:+32" for a in SWEEP]
        self.assertEqual(flashbench("run", *other_sweep, "--shard", "1/3", "--format", "jsonl", "--out",
                                    str(other)).returncode, 0)
        copy = self.dir / "copy-of-shard-0.jsonl"
        copy.write_bytes(self.shards[0].read_bytes())
        newer = self.dir / "newer.json"
        newer.write_text(json.dumps({"schema_version": 2, "meta": {}, "rows": []}))
        out = self.dir / "refused.json"
        for inputs, fragment in (([self.shards[0], other], "shards of different sweeps"),
                                 ([self.shards[0], copy], "are both shard 0/3"),
                                 ([self.shards[0], self.whole], "is shard 0/3 of sweep"),
                                 ([self.whole, newer], "schema_version differs"),
                                 ([self.whole, self.whole], "both hold cpu")):
            self.assert_usage_error(flashbench("merge", *map(str, inputs), "--out", str(out)), fragment)
            self.assertFalse(out.exists(), inputs)
        self.assert_usage_error(flashbench("merge", "--out", str(out)), "nothing to merge")

    def test_merge_keeps_peers_rows_as_written(self):
        peer = self.dir / "peer.json"
        peer_row = {"backend": "torch-sdpa-flash", "variant": "v2", "status": "ok", "extra": "kept",
                    "problem": {"batch": 1, "heads": 1, "seq": 32, "head_dim": 16}}
        peer.write_text(json.dumps({"schema_version": 1, "meta": {"tool": "torch_sdpa.py"}, "rows": [peer_row]}))
        merged = self.dir / "with-peer.json"
        # A file after --peer is flashbench's own again: one file per --peer.
        result = flashbench("merge", "--peer", str(peer), str(self.whole), "--out", str(merged))
        self.assertEqual(result.returncode, 0, result.stderr)
        document = json.loads(merged.read_text())
        self.assertEqual(document["rows"][-1], peer_row)
        self.assertEqual(document["rows"][:-1], json.loads(self.whole.read_text())["rows"])
        self.assertEqual(document["meta"]["peers"], [{"tool": "torch_sdpa.py"}])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
