#!/usr/bin/env python3
"""A sweep on a real Slurm cluster: a single-node cluster on this machine (Debian's slurm-wlm and
munge: munged, slurmctld and slurmd on localhost, a minimal slurm.conf, no cgroups, everything in a
temporary folder that is removed afterwards, on failure too) runs a small CPU sweep as a job array of
4 tasks through scripts/slurm/submit.sh (sbatch); one task is requeued in the middle of its shard
(`scontrol requeue`: Slurm's SIGTERM, then the task runs again with --resume); the dependent merge job
writes one file, which must hold the rows of a single-process run of the same sweep, row for row
(configuration, implementation, status), and name no configuration missing. It prints the log of the
array run, the requeue and the merge.

It starts daemons as root: it skips (exit 77, which CTest reports as skipped) when not root, or when
slurm-wlm or munge is not installed (scripts/test.sh installs them when run as root).

usage: tests/scripts/slurm_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77
SHARDS = 4
REQUEUED = 1  # the task that is requeued mid-run
# 32 configurations (8 N x 2 H x 2 masks), 8 a shard, 4 implementations each, about 0.3 s a
# configuration; --mem-limit makes the largest standard, v1 and checkpoint rows `skipped`, so the
# statuses compared are not all alike.
SWEEP = ["--seq", "64:512:+64", "--heads", "1,2", "--head-dim", "16", "--mask", "both", "--threads", "1",
         "--max-time", "0.02", "--min-samples", "5", "--warmup-time", "50", "--mem-limit", "1MiB"]
DEADLINE_S = 150  # the whole cluster's work; CTest's own timeout is above it
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "munge")


def log(text):
    print(text, flush=True)


def skip_reason():
    if os.geteuid() != 0:
        return "not root: the test starts munged, slurmctld and slurmd (CI runs it as root)"
    missing = [tool for tool in DAEMONS + CLIENTS if shutil.which(tool) is None
               and not os.path.exists(f"/usr/sbin/{tool}")]
    if missing:
        return (f"{', '.join(missing)} not installed: apt-get install slurmctld slurmd slurm-client munge "
                "(scripts/test.sh does it as root)")
    return None


def tool(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Cluster:
    """munged, slurmctld and slurmd on localhost, each with its files under `root`."""

    def __init__(self, root):
        self.root = root
        self.env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))
        self.pid_files = [root / "munge" / "munged.pid", root / "slurmctld.pid", root / "slurmd.pid"]

    def start(self):
        root = self.root
        # munged refuses a socket folder others cannot enter, and a key others can read.
        root.chmod(0o755)
        munge = root / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = munge / "munge.socket"
        subprocess.run([tool("munged"), f"--key-file={key}", f"--socket={socket_path}",
                        f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                        f"--seed-file={munge / 'munged.seed'}", "--num-threads=2"], check=True, timeout=30)
        for folder in ("state", "spool", "log"):
            (root / folder).mkdir()
        controller_port, node_port = free_ports(2)
        host = socket.gethostname().split(".")[0]
        (root / "slurm.conf").write_text(f"""\
ClusterName=flashbenchtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={controller_port}
SlurmdPort={node_port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'slurmd.pid'}
SlurmctldLogFile={root / 'log' / 'slurmctld.log'}
SlurmdLogFile={root / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
NodeName=flashbenchnode NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=flashbenchtest Nodes=flashbenchnode Default=YES MaxTime=INFINITE State=UP
""")
        # -i: ignore any saved state; both daemonize and write their pid files.
        subprocess.run([tool("slurmctld"), "-i"], env=self.env, check=True, timeout=30)
        subprocess.run([tool("slurmd"), "-N", "flashbenchnode"], env=self.env, check=True, timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = self.slurm("sinfo", "-h", "-o", "%t", check=False).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError(f"the node did not come up (sinfo says {state!r})")

    def slurm(self, *command, check=True):
        return subprocess.run([tool(command[0]), *command[1:]], env=self.env, capture_output=True, text=True,
                              check=check, timeout=30)

    def stop(self):
        """Every job cancelled, every daemon this test started ended by its pid, on any path out."""
        if (self.root / "slurm.conf").exists():
            for command in (["scancel", "--full", "--partition=flashbenchtest"], ["scontrol", "shutdown"]):
                try:
                    self.slurm(*command, check=False)
                except (OSError, subprocess.SubprocessError):
                    pass
        for pid_file in reversed(self.pid_files):
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                for _ in range(50):
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.1)
                else:
                    continue
                break


def rows_of(path):
    with open(path, encoding="utf-8") as handle:
        return [(r["backend"], r["impl"], json.dumps(r["problem"], sort_keys=True), r["status"])
                for r in json.load(handle)["rows"]]


def row_lines(path):
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.startswith('{"backend"'))


def main():
    binary, source = os.path.abspath(sys.argv[1]), Path(sys.argv[2]).resolve()
    reason = skip_reason()
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)
        log(f"{'ok' if condition else 'FAIL'} {what}")

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flashbench-slurm-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # munged wants every folder above its socket open to all
        cluster = Cluster(root / "cluster")
        (root / "cluster").mkdir()
        out = root / "sweep"
        previous = {sig: signal.signal(sig, lambda number, _: sys.exit(128 + number))
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            cluster.start()
            log(f"== cluster up in {time.monotonic() - started:.1f} s: {cluster.slurm('sinfo').stdout.strip()}")

            # The same sweep in one process, meanwhile, for the row-by-row comparison.
            single = root / "single.json"
            reference = subprocess.Popen([binary, "run", *SWEEP, "--format", "json", "--out", str(single)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

            submitted = subprocess.run([str(source / "scripts" / "slurm" / "submit.sh"), str(out), *SWEEP],
                                       env=dict(cluster.env, SHARDS=str(SHARDS), FLASHBENCH=binary),
                                       capture_output=True, text=True, timeout=60)
            log(f"== submit: {submitted.stdout.strip()} {submitted.stderr.strip()}")
            check(submitted.returncode == 0, "scripts/slurm/submit.sh submitted the array and the merge")
            if submitted.returncode != 0:
                return 1
            words = submitted.stdout.split()
            sweep_job, merge_job = words[words.index("sweep") + 1], words[words.index("merge") + 1]

            # Requeue task REQUEUED once it has finished a configuration and before it has finished all.
            shard_file = out / f"shard-{REQUEUED}.jsonl"
            task = f"{sweep_job}_{REQUEUED}"
            requeued_at = None
            while time.monotonic() - started < DEADLINE_S and requeued_at is None:
                if row_lines(shard_file) >= 4:
                    requeued = cluster.slurm("scontrol", "requeue", task, check=False)
                    requeued_at = row_lines(shard_file)
                    log(f"== scontrol requeue {task} with {requeued_at} rows in {shard_file.name}: "
                        f"exit {requeued.returncode} {requeued.stderr.strip()}")
                    log(cluster.slurm("squeue", "-o", "%.10i %.9T %.12r %.6M", check=False).stdout.rstrip())
                time.sleep(0.02)
            check(requeued_at is not None, f"task {task} was requeued")
            # Slurm holds a requeued job back (BeginTime) for a while; let it start now.
            for _ in range(100):
                state = cluster.slurm("squeue", "-h", "-j", task, "-o", "%T %r", check=False).stdout.strip()
                if state.startswith("PENDING"):
                    cluster.slurm("scontrol", "update", f"jobid={task}", "StartTime=now", check=False)
                    log(f"== {task}: {state}; StartTime=now")
                    break
                time.sleep(0.1)

            while time.monotonic() - started < DEADLINE_S:
                queue = cluster.slurm("squeue", "-h", "-o", "%i %T %r", check=False).stdout.split("\n")
                if not [line for line in queue if line.strip()]:
                    break
                time.sleep(0.5)
            else:
                check(False, f"the jobs ended within {DEADLINE_S} s: {queue}")
            _, reference_err = reference.communicate(timeout=max(10, DEADLINE_S - (time.monotonic() - started)))
            check(reference.returncode == 0, f"the single-process run: exit {reference.returncode} {reference_err}")

            logs = sorted((out / "logs").glob("*"))
            for path in logs:
                log(f"== {path.name}\n{path.read_text().rstrip()}")
            task_log = next((p.read_text() for p in logs if p.name.endswith(f"_{REQUEUED}.out")), "")
            check("stopped by SIGTERM" in task_log, f"task {REQUEUED} stopped on the requeue's SIGTERM")
            resumed = [line for line in task_log.splitlines() if "resuming" in line]
            check(len(resumed) == 1, f"task {REQUEUED} ran again and resumed: {resumed}")
            if resumed:
                kept, share = [int(w) for w in resumed[0].split(":")[-1].split() if w.isdigit()][:2]
                check(0 < kept < share, f"... in the middle of its shard ({kept} of {share} configurations kept)")
            with open(shard_file, encoding="utf-8") as handle:
                shard_meta = json.loads(handle.readline())["meta"]
            check(len(shard_meta.get("resumed_from", [])) == 1, "its file records the run it resumed")

            merged_path = out / "sweep.json"
            check(merged_path.exists(), "the merge job wrote sweep.json")
            if merged_path.exists() and single.exists():
                merged, alone = rows_of(merged_path), rows_of(single)
                check(len(merged) == 32 * 4, f"merged: {len(merged)} rows (32 configurations x 4)")
                check(merged == alone, "merged rows equal the single-process run's, row for row "
                                       "(configuration, implementation, status)")
                statuses = sorted({row[3] for row in merged})
                check(statuses == ["ok", "skipped"], f"statuses compared: {statuses}")
                with open(merged_path, encoding="utf-8") as handle:
                    meta = json.load(handle)["meta"]
                check(meta["complete"] is True, "merged meta.complete")
                check(sorted(i["meta"]["sweep"]["shard"]["index"] for i in meta["inputs"]) == list(range(SHARDS)),
                      "merged from the four shards")
            def job_state(job):
                fields = cluster.slurm("scontrol", "show", "job", job, check=False).stdout.split()
                return {k: v for k, _, v in (f.partition("=") for f in fields) if k in ("JobState", "Restarts", "ExitCode")}

            log("== jobs at the end")
            for job in [f"{sweep_job}_{i}" for i in range(SHARDS)] + [merge_job]:
                log(f"{job}: {job_state(job)}")
            check(job_state(task).get("Restarts") == "1", f"task {task} ran twice (Slurm counts one restart)")
        finally:
            cluster.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    log(f"== {time.monotonic() - started:.1f} s, cluster stopped and its folder removed")
    if failures:
        log(f"{len(failures)} failed: {failures}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
