#!/usr/bin/env python3
"""Plugins through the command line: the CPU example (examples/plugins/cpu) runs by `run --plugin`
beside v2 and standard with its float64 check passing and its memory as modelled; a broken plugin's
rows are `failed`, naming what went wrong, while the sweep goes on and exits 1; a library without
the entry point or of another ABI version is one line and exit 2; `info --plugin` lists what a
plugin offers; FLASHBENCH_PLUGINS loads the same way. The plugins are the build's (<build>/plugins).
Where the build has the CUDA example and this machine a CUDA device, the CUDA example runs beside
v2 and cudnn in bf16 and fp16 on the same inputs, its check passing and its memory as modelled
(without a device that part says it skipped).

usage: tests/cli/plugin_cli_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

failures = 0


def check(condition, what):
    global failures
    if not condition:
        failures += 1
    print(f"{'ok' if condition else 'FAIL'} {what}")


def flashbench(binary, args, env=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def rows_by_impl(path):
    rows = json.loads(Path(path).read_text())["rows"]
    return rows, {(row["impl"], row["problem"]["seq_q"]): row for row in rows}


def main():
    binary = sys.argv[1]
    plugins = Path(binary).resolve().parent / "plugins"
    naive, broken = str(plugins / "naive_plugin.so"), str(plugins / "broken_plugin.so")
    small = ["--heads", "2", "--head-dim", "16", "--threads", "1", "--max-time", "0.5", "--format", "json"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        # The example beside v2 and standard, on GQA with the causal mask and N_k != N.
        out = tmp / "naive.json"
        result = flashbench(binary, ["run", "--plugin", naive, "--impl", "v2,standard,naive.c", "--seq-q", "37",
                                     "--seq-k", "53", "--kv-heads", "1", "--causal", *small, "--out", str(out)])
        check(result.returncode == 0, f"run --plugin naive exits 0 (exit {result.returncode}: {result.stderr.strip()})")
        rows, by_impl = rows_by_impl(out)
        check([row["impl"] for row in rows] == ["v2", "standard", "naive.c"], "one row each, in the order asked")
        row = by_impl[("naive.c", 37)]
        check(row["status"] == "ok" and row["check"]["passed"], f"naive.c is ok and its check passed: {row['reason']}")
        check(sorted(row["check"]["tensors"]) == ["O", "dK", "dQ", "dV"], "every tensor of naive.c compared")
        measured, model = row["memory"]["measured"], row["memory"]["model"]
        check(measured["peak_bytes"] == model["peak_bytes"] and measured["by_tag"] == model["by_tag"],
              f"naive.c's model = measured ({model['peak_bytes']} vs {measured['peak_bytes']})")
        check(measured["by_tag"]["workspace"] == 2 * 53 * 4, "its backward workspace (two rows of N_k) is the ledger's")
        check(row["reproducibility"]["inputs_hash"] == by_impl[("v2", 37)]["reproducibility"]["inputs_hash"],
              "naive.c ran on v2's inputs")
        meta = json.loads(out.read_text())["meta"]
        check(meta["plugins"] == [{"path": naive, "name": "naive-cpu", "abi_version": 1, "implementations": ["naive.c"]}],
              "meta.plugins records the library")

        # A broken plugin among good ones over two configurations: failed rows, every row there, exit 1.
        out = tmp / "broken.json"
        result = flashbench(binary, ["run", "--plugin", broken, "--impl", "broken.wrong,broken.error,naive.c", "--seq",
                                     "32,48", *small, "--out", str(out)], env={"FLASHBENCH_PLUGINS": naive})
        check(result.returncode == 1, f"a failed plugin row exits 1 (exit {result.returncode}: {result.stderr.strip()})")
        rows, by_impl = rows_by_impl(out)
        check(len(rows) == 6, f"the sweep went on: 6 rows ({len(rows)})")
        for n in (32, 48):
            wrong, error, good = by_impl[("broken.wrong", n)], by_impl[("broken.error", n)], by_impl[("naive.c", n)]
            check(wrong["status"] == "failed" and wrong["reason"].startswith("dK differs from float64"),
                  f"N={n}: wrong numbers fail naming dK: {wrong['reason']}")
            check(error["status"] == "failed" and "forward returned 7: broken.error refuses every call" in error["reason"],
                  f"N={n}: an error return fails with the plugin's reason: {error['reason']}")
            check(good["status"] == "ok", f"N={n}: the good plugin beside them is ok")

        # Load errors: one line, exit 2, before anything runs.
        for library, needle in [(plugins / "no_entry_plugin.so", "no entry point flashbench_plugin()"),
                                (plugins / "other_abi_plugin.so", "plugin ABI version 2, this flashbench loads version 1"),
                                (tmp / "missing.so", "cannot load it")]:
            for args, env in [(["run", "--plugin", str(library), "--seq", "16"], None),
                              (["run", "--seq", "16"], {"FLASHBENCH_PLUGINS": str(library)}),
                              (["info", "--plugin", str(library)], None)]:
                result = flashbench(binary, args, env)
                lines = [line for line in result.stderr.splitlines() if line.strip()]
                check(result.returncode == 2 and len(lines) == 1 and needle in result.stderr and not result.stdout,
                      f"{args[0]} {library.name}{' (FLASHBENCH_PLUGINS)' if env else ''}: exit {result.returncode}, "
                      f"{result.stderr.strip()!r}")
        # The same library from both places is loaded once; a copy of it elsewhere offers a name taken.
        result = flashbench(binary, ["run", "--plugin", naive, "--impl", "naive.c", "--seq", "16", *small],
                            env={"FLASHBENCH_PLUGINS": naive})
        check(result.returncode == 0, f"the same library twice is loaded once (exit {result.returncode})")
        copy = tmp / "copy.so"
        copy.write_bytes(Path(naive).read_bytes())
        result = flashbench(binary, ["run", "--plugin", naive, "--plugin", str(copy), "--seq", "16"])
        check(result.returncode == 2 and "cpu already has an implementation of that name" in result.stderr,
              f"a name taken is refused: {result.stderr.strip()!r}")

        # info lists what the plugins offer, in the table and in JSON.
        result = flashbench(binary, ["info", "--plugin", naive, "--plugin", broken])
        check(result.returncode == 0 and "plugin       naive-cpu" in result.stdout and "--impl broken.overrun" in result.stdout,
              "info --plugin lists both plugins")
        info = json.loads(flashbench(binary, ["info", "--plugin", naive, "--format", "json"]).stdout)
        check(info["plugins"][0]["implementations"][0] == {"name": "naive.c", "device": "cpu", "variant": "v2",
                                                         "summary": "plain fp32 attention in C, one thread, v2's kept O and LSE"},
              "info --format json describes the implementation")
        cpu = next(device for device in info["devices"] if device["name"] == "cpu")
        check(any(i["name"] == "naive.c" for i in cpu["implementations"]), "it is listed among the CPU's implementations")
        check(flashbench(binary, ["run", "--impl", "naive.c", "--seq", "16"]).returncode == 2,
              "without the plugin, naive.c is an unknown implementation")

        check_cuda_example(binary, plugins / "simple_cuda_plugin.so", tmp)

    print(f"{failures} failure(s)")
    return 1 if failures else 0


def check_cuda_example(binary, library, tmp):
    """The CUDA example beside v2 and cudnn, in both 16-bit dtypes, a prime N and the causal mask."""
    if not library.exists():
        print(f"skip the CUDA example: {library.name} is not built (no CUDA backend)")
        return
    info = json.loads(flashbench(binary, ["info", "--format", "json"]).stdout)
    cuda = next(device for device in info["devices"] if device["name"] == "cuda")
    if not cuda["available"]:
        print(f"skip the CUDA example: {cuda.get('why', 'no CUDA device')}")
        return
    for dtype in ("bf16", "fp16"):
        out = tmp / f"simple-cuda-{dtype}.json"
        result = flashbench(binary, ["run", "--backend", "cuda", "--plugin", str(library), "--impl", "v2,cudnn,simple.cuda",
                                     "--dtype", dtype, "--seq", "257", "--heads", "4", "--head-dim", "64",
                                     "--causal", "--max-time", "0.5", "--format", "json", "--out", str(out)])
        check(result.returncode == 0, f"{dtype}: run --plugin simple.cuda exits 0 (exit {result.returncode}: "
                                      f"{result.stderr.strip()})")
        if not out.exists():
            continue
        rows, by_impl = rows_by_impl(out)
        simple, v2 = by_impl[("simple.cuda", 257)], by_impl[("v2", 257)]
        check(simple["status"] == "ok" and simple["check"]["passed"] and
              sorted(simple["check"]["tensors"]) == ["O", "dK", "dQ", "dV"],
              f"{dtype}: simple.cuda is ok, O, dQ, dK, dV each checked: {simple['reason']}")
        measured, model = simple["memory"]["measured"], simple["memory"]["model"]
        check(measured["peak_bytes"] == model["peak_bytes"] and measured["by_tag"] == model["by_tag"],
              f"{dtype}: simple.cuda's model = measured ({model['peak_bytes']} vs {measured['peak_bytes']})")
        check(simple["reproducibility"]["inputs_hash"] == v2["reproducibility"]["inputs_hash"],
              f"{dtype}: simple.cuda ran on v2's inputs")
        cudnn = by_impl.get(("cudnn", 257))
        check(cudnn is not None and cudnn["status"] in ("ok", "skipped"),
              f"{dtype}: cudnn's row beside it ({cudnn and cudnn['status']}: {cudnn and cudnn['reason']})")


if __name__ == "__main__":
    sys.exit(main())
