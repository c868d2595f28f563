#!/usr/bin/env python3
"""Every command of the command blocks of README.md and docs/usage.md runs and passes its checks,
scaled down where the full size would take minutes on a 2-core machine (smaller N and H, short
sampling); the scaled command keeps every flag of the example. A command block is a ```sh block
(each line a command, a trailing backslash continuing it, `#` starting a comment) or a ```console
block (each line that starts with `$ ` a command, the rest its output). A command added to either
file without a line here fails the test, and so does a line here that neither file has any more, so
the list cannot drift from the docs. GPU examples run where this machine has a CUDA device (and,
for cuDNN's, cuDNN), and say that they were skipped elsewhere.

usage: tests/cli/readme_examples_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

QUICK = ["--max-time", "0.1"]

# The files whose command blocks hold the examples.
DOCS = ("README.md", "docs/usage.md")

# Command (as written, without its comment) -> the arguments run here ({tmp} is a scratch folder,
# {src} the source tree, {plugins} the build's example plugins), CUDA(arguments) for one that needs a
# GPU, or a reason it is covered elsewhere.
CUDA_QUICK = ["--max-time", "0.1", "--heads", "2"]


class CUDA(list):
    """Arguments that run only where a CUDA device is present."""


SCALED = {
    "flashbench run --seq 4096": ["run", "--seq", "512", "--heads", "2", *QUICK],
    "flashbench run --seq 512:8192:x2 --causal --format json --out cpu.json":
        ["run", "--seq", "128:512:x2", "--heads", "2", "--causal", "--format", "json", "--out", "{tmp}/cpu.json", *QUICK],
    "flashbench run --config configs/quick.json":
        ["run", "--config", "{src}/configs/quick.json", "--seq", "128,256", "--heads", "2", *QUICK],
    "flashbench run --seq 4096 --variant v2,standard --threads 1 --layers 4 --mem-limit 8GiB":
        ["run", "--seq", "512", "--heads", "2", "--variant", "v2,standard", "--threads", "1", "--layers", "4",
         "--mem-limit", "8GiB", *QUICK],
    "flashbench run --seq 2048 --heads 32 --dtype fp16 --layers 2":
        ["run", "--seq", "256", "--heads", "2", "--dtype", "fp16", "--layers", "2", *QUICK],
    "flashbench run --seq 4096 --heads 2 --impl v2.whole,v2.split":
        ["run", "--seq", "512", "--heads", "2", "--impl", "v2.whole,v2.split", *QUICK],
    "flashbench run --seq 512:8192:x2 --shard 1/4 --resume --format json --out shard-1.json":
        ["run", "--seq", "128:1024:x2", "--heads", "2", "--shard", "1/4", "--resume", "--format", "json", "--out",
         "{tmp}/shard-1.json", *QUICK],
    "flashbench merge shard-0.json shard-1.json shard-2.json shard-3.json --out sweep.json":
        "shard_resume_merge_test.py merges a sweep's shards and compares them with one process's run",
    "flashbench run --seq 2048 --heads 32 --kv-heads 1,8 --expand-kv --causal --dropout 0.1":
        ["run", "--seq", "256", "--heads", "4", "--kv-heads", "1,2", "--expand-kv", "--causal", "--dropout", "0.1",
         *QUICK],
    "flashbench run --seq-q 512 --seq-k 8192 --heads 8 --kv-heads 2 --causal":
        ["run", "--seq-q", "64", "--seq-k", "300", "--heads", "4", "--kv-heads", "2", "--causal", *QUICK],
    "flashbench model --preset activation-recomputation": ["model", "--preset", "activation-recomputation"],
    "flashbench run --seq 1024,4096 --rounds 9 --format json --out after.json":
        ["run", "--seq", "128,256", "--heads", "2", "--rounds", "9", "--format", "json", "--out", "{tmp}/after.json",
         "--max-time", "0.02"],
    "flashbench run --seq 1024:16384:x2 --tokens 16384 --causal --dry-run":
        "run_options_test.py runs --tokens and --dry-run and compares the plan with the real run's rows",
    "flashbench run --seq 512:4096:x2 --export-json cpu.json --export-csv cpu.csv --export-md cpu.md":
        ["run", "--seq", "128:256:x2", "--heads", "2", "--export-json", "{tmp}/exported.json", "--export-csv",
         "{tmp}/exported.csv", "--export-md", "{tmp}/exported.md", *QUICK],
    "flashbench run --seq 4096 --variant v2 --profile": ["run", "--seq", "256", "--heads", "2", "--variant", "v2", "--profile"],
    "source <(flashbench completion bash)": ["completion", "bash"],
    "flashbench compare before.json after.json --format md": ["compare", "{tmp}/cpu.json", "{tmp}/cpu.json", "--format", "md"],
    "flashbench compare before.json after.json --fail-on-regression":
        ["compare", "{tmp}/cpu.json", "{tmp}/cpu.json", "--fail-on-regression"],
    "flashbench compare --baseline standard cpu.json": ["compare", "--baseline", "standard", "{tmp}/cpu.json"],
    "flashbench model --seq 32768 --heads 32 --dtype fp16": ["model", "--seq", "32768", "--heads", "32", "--dtype", "fp16"],
    "flashbench model --backend cuda --seq 16384 --heads 16 --head-dim 128 --dtype bf16":
        ["model", "--backend", "cuda", "--seq", "16384", "--heads", "16", "--head-dim", "128", "--dtype", "bf16"],
    "flashbench model --preset list": ["model", "--preset", "list"],
    "flashbench model --preset gradient-flow": ["model", "--preset", "gradient-flow"],
    "flashbench fit --budget 16GiB --heads 32 --head-dim 128 --dtype fp16":
        ["fit", "--budget", "16GiB", "--heads", "32", "--head-dim", "128", "--dtype", "fp16"],
    "flashbench model --backend cuda --cp 8 --causal --seq 1048576 --heads 32 --head-dim 128 --dtype bf16":
        ["model", "--backend", "cuda", "--cp", "8", "--causal", "--seq", "1048576", "--heads", "32", "--head-dim",
         "128", "--dtype", "bf16"],
    "flashbench fit --backend cuda --cp 8 --causal --budget 141GB --heads 32 --head-dim 128 --dtype bf16 --layers 32":
        ["fit", "--backend", "cuda", "--cp", "8", "--causal", "--budget", "141GB", "--heads", "32", "--head-dim", "128",
         "--dtype", "bf16", "--layers", "32"],
    "flashbench grad --variant v2 --causal --q q.npy --k k.npy --v v.npy --do do.npy --out grads/":
        ["grad", "--variant", "v2", "--causal", "--q", "{tmp}/q.npy", "--k", "{tmp}/k.npy", "--v", "{tmp}/v.npy",
         "--do", "{tmp}/do.npy", "--out", "{tmp}/grads"],
    "flashbench info": ["info"],
    "flashbench info --peak": ["info", "--peak", "--peak-size", "256"],
    "flashbench run --seq 4096 --peak": ["run", "--seq", "512", "--heads", "2", "--peak", *QUICK],
    "scripts/cpu-bench.sh ../cpu-bench": "minutes of benchmark: bench_scripts_test.py runs it against a fake build",
    "/usr/bin/python3 scripts/plot.py cpu.json --out plots/": "plot_test.py draws from a run's JSON",
    # README.md: the two commands, and the handful with their output
    "scripts/setup.sh": "the README's first command: CI (.ci/run) runs scripts/test.sh, which runs setup.sh --no-run",
    "scripts/test.sh": "the README's second command: CI (.ci/run) runs it, and it runs this test",
    "flashbench run --seq 1024 --heads 2 --max-time 0.5": ["run", "--seq", "512", "--heads", "2", "--max-time", "0.1"],
    # docs/usage.md beyond its "Every example" block
    "SHARDS=16 SBATCH_PARTITION=gpu SBATCH_GRES=gpu:1 SBATCH_TIMELIMIT=4:00:00 scripts/slurm/submit.sh ../long-context "
    "--config configs/long-context.json --backend cuda --max-time 1":
        "slurm_test.py submits a CPU sweep through scripts/slurm/submit.sh to a real single-node Slurm",
    "parallel -j8 flashbench run --config configs/long-context.json --backend cuda --shard {}/8 --device-index {} "
    "--resume --format jsonl --out out/shard-{}.jsonl ::: 0 1 2 3 4 5 6 7":
        "eight GPUs; shard_resume_merge_test.py runs shards with --resume and merges them",
    "flashbench merge out/shard-*.jsonl --out out/sweep.json":
        "shard_resume_merge_test.py merges a sweep's shards and compares them with one process's run",
    "flashbench run --config configs/scaling.json --format json --out scaling-cpu.json":
        ["run", "--config", "{src}/configs/scaling.json", "--seq", "128,256", "--heads", "2", "--format", "json",
         "--out", "{tmp}/scaling-cpu.json", *QUICK],
    "/usr/bin/python3 scripts/plot.py scaling-cpu.json --out plots/": "plot_test.py draws from a run's JSON",
    "flashbench run --backend cuda --dtype bf16 --head-dim 128 --heads 16 --seq 4096 --batch 4 --mask both":
        CUDA(["run", "--backend", "cuda", "--dtype", "bf16", "--head-dim", "128", "--seq", "256", "--batch", "4",
              "--mask", "both", *CUDA_QUICK]),
    "flashbench run --backend cuda --dtype bf16 --seq 16384 --heads 16 --impl v2,v2.mma":
        CUDA(["run", "--backend", "cuda", "--dtype", "bf16", "--seq", "512", "--impl", "v2,v2.mma", *CUDA_QUICK]),
    "flashbench run --backend cuda --impl cudnn,v2 --dtype bf16 --head-dim 128 --seq 1024,4096":
        CUDA(["run", "--backend", "cuda", "--impl", "cudnn,v2", "--dtype", "bf16", "--head-dim", "128", "--seq",
              "256,512", *CUDA_QUICK]),
    "flashbench grad --backend cuda --dtype bf16 --impl cudnn --q x.npy --k x.npy --v x.npy --do do.npy --out grads/":
        CUDA(["grad", "--backend", "cuda", "--dtype", "bf16", "--impl", "cudnn", "--q", "{tmp}/x.npy", "--k",
              "{tmp}/x.npy", "--v", "{tmp}/x.npy", "--do", "{tmp}/do-x.npy", "--out", "{tmp}/grads-cuda"]),
    "scripts/gpu-deps.sh": "copies other packages' headers into .deps/ for a GPU machine, once; no test runs it",
    "scripts/gpu-check.sh OUT/check": "bench_scripts_test.py runs it against a fake cmake",
    "scripts/gpu-bench.sh OUT": "minutes on a GPU: bench_scripts_test.py runs it against a fake build",
    "scripts/gpu-ncu.sh OUT BUILD backward_kernel": "gpu_ncu_test.py runs it against a fake ncu",
    "scripts/gpu-ab.sh OUT A B": "bench_scripts_test.py runs two builds alternately through it",
    "cc -std=c99 -O2 -shared -fPIC -I PREFIX/include naive_attention.c plugin.c -o naive_plugin.so -lm":
        "the build makes the same library (examples/plugins/CMakeLists.txt), which the next two examples load",
    "flashbench run --plugin ./naive_plugin.so --impl v2,standard,naive.c --seq 512 --causal":
        ["run", "--plugin", "{plugins}/naive_plugin.so", "--impl", "v2,standard,naive.c", "--seq", "128", "--causal",
         "--heads", "2", *QUICK],
    "flashbench info --plugin ./naive_plugin.so": ["info", "--plugin", "{plugins}/naive_plugin.so"],
    "FLASHBENCH_PLUGINS=./a.so:./b.so flashbench run --impl mine,v2 ...":
        "a sketch (a.so, b.so, mine): plugin_cli_test.py loads plugins through FLASHBENCH_PLUGINS",
}


def commands(text):
    """The commands of a Markdown text's ```sh and ```console blocks, each as one line without its
    comment."""
    found = []
    for lang, block in re.findall(r"^```(sh|console)\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.splitlines()
        if lang == "console":
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        pending = ""
        for line in lines:
            line = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            line = (pending + line).strip()
            pending = ""
            if line:
                found.append(" ".join(line.split()))
    return found


def examples(source):
    """Each command of DOCS once, in order, with the files it appears in."""
    where = {}
    for doc in DOCS:
        for command in commands((Path(source) / doc).read_text()):
            where.setdefault(command, []).append(doc)
    return where


def has_cuda(binary):
    info = subprocess.run([binary, "info", "--format", "json"], capture_output=True, text=True, timeout=120)
    if info.returncode != 0:
        return False
    devices = json.loads(info.stdout).get("devices", [])
    return any(d.get("name") == "cuda" and d.get("available") for d in devices)


def main():
    binary, source = sys.argv[1], sys.argv[2]
    failures = 0
    where = examples(source)
    missing = [e for e in where if e not in SCALED]
    stale = [e for e in SCALED if e not in where]
    for e in missing:
        print(f"FAIL the example {e!r} ({', '.join(where[e])}) has no scaled command here")
    for e in stale:
        print(f"FAIL {e!r} is in neither {' nor '.join(DOCS)} any more")
    failures += len(missing) + len(stale)
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(7)
        for name in ("q", "k", "v", "do"):
            np.save(f"{tmp}/{name}.npy", rng.standard_normal((1, 2, 33, 16)).astype(np.float32))
        for name in ("x", "do-x"):  # a shape cuDNN's kernels take (N a multiple of 128, d of 8)
            np.save(f"{tmp}/{name}.npy", rng.standard_normal((1, 2, 128, 64)).astype(np.float32))
        cuda = has_cuda(binary)
        plugins = Path(binary).resolve().parent / "plugins"
        for example in where:
            scaled = SCALED.get(example)
            if not isinstance(scaled, list):
                print(f"skip {example!r}: {scaled}")
                continue
            if isinstance(scaled, CUDA) and not cuda:
                print(f"skip {example!r}: no CUDA device here")
                continue
            args = [a.format(tmp=tmp, src=source, plugins=plugins) for a in scaled]
            if "{plugins}" in " ".join(scaled) and not (plugins / "naive_plugin.so").exists():
                print(f"skip {example!r}: this build has no example plugins ({plugins})")
                continue
            result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
            ok = result.returncode == 0
            why = f"exit {result.returncode}: {result.stderr.strip()[-300:]}"
            if isinstance(scaled, CUDA) and "cudnn" in args and result.returncode == 2 and "cuDNN" in result.stderr:
                print(f"skip {example!r}: no cuDNN here ({result.stderr.strip()[-200:]})")
                continue
            if ok and args[0] == "run":  # every row that ran was checked against float64 and passed
                out = Path(f"{tmp}/example.json")
                again = subprocess.run([binary, *args, "--format", "json", "--out", str(out)] if "--out" not in args
                                       else [binary, *args], capture_output=True, text=True, timeout=600)
                rows = json.loads((out if "--out" not in args else Path(args[args.index("--out") + 1])).read_text())["rows"]
                bad = [r["impl"] for r in rows if (r["status"] != "ok" or not (r.get("check") or {}).get("passed"))
                       and not (isinstance(scaled, CUDA) and r["impl"] == "cudnn" and r["status"] == "skipped")]
                ok = again.returncode == 0 and not bad and rows
                why = f"rows not ok or not checked: {bad}"
            if not ok:
                failures += 1
            print(f"{'ok' if ok else 'FAIL'} {example!r} as {' '.join(args)!r}" + ("" if ok else f": {why}"))
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
