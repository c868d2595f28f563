#!/usr/bin/env python3
"""Every example of the README's "Using it" block runs and passes its checks, scaled down where the
full size would take minutes on a 2-core machine (smaller N and H, short sampling); the scaled
command keeps every flag of the example. An example added to the README without a line here fails
the test, so the list cannot drift from the README.

usage: readme_examples_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

QUICK = ["--max-time", "0.1"]

# README command (as written, without its comment) -> the arguments run here ({tmp} is a scratch
# folder, {src} the source tree), or a reason it is covered elsewhere.
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
        "run_habits_test.py runs --tokens and --dry-run and compares the plan with the real run's rows",
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
}


def readme_examples(source):
    text = (Path(source) / "README.md").read_text()
    block = text.split("## Using it", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


def main():
    binary, source = sys.argv[1], sys.argv[2]
    failures = 0
    examples = readme_examples(source)
    missing = [e for e in examples if e not in SCALED]
    stale = [e for e in SCALED if e not in examples]
    for e in missing:
        print(f"FAIL the README example {e!r} has no scaled command here")
    for e in stale:
        print(f"FAIL {e!r} is no longer in the README")
    failures += len(missing) + len(stale)
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(7)
        for name in ("q", "k", "v", "do"):
            np.save(f"{tmp}/{name}.npy", rng.standard_normal((1, 2, 33, 16)).astype(np.float32))
        for example in examples:
            scaled = SCALED.get(example)
            if not isinstance(scaled, list):
                print(f"skip {example!r}: {scaled}")
                continue
            args = [a.format(tmp=tmp, src=source) for a in scaled]
            result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
            ok = result.returncode == 0
            why = f"exit {result.returncode}: {result.stderr.strip()[-300:]}"
            if ok and args[0] == "run":  # every row that ran was checked against float64 and passed
                out = Path(f"{tmp}/example.json")
                again = subprocess.run([binary, *args, "--format", "json", "--out", str(out)] if "--out" not in args
                                       else [binary, *args], capture_output=True, text=True, timeout=600)
                rows = json.loads((out if "--out" not in args else Path(args[args.index("--out") + 1])).read_text())["rows"]
                bad = [r["impl"] for r in rows if r["status"] != "ok" or not (r.get("check") or {}).get("passed")]
                ok = again.returncode == 0 and not bad and rows
                why = f"rows not ok or not checked: {bad}"
            if not ok:
                failures += 1
            print(f"{'ok' if ok else 'FAIL'} {example!r} as {' '.join(args)!r}" + ("" if ok else f": {why}"))
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
