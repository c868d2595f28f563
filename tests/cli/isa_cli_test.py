#!/usr/bin/env python3
"""The CPU kernels' instruction set, chosen at start-up and forced by --isa (cpu/isa.hpp):

1. `info --format json` names the active ISA, those this CPU supports and those the binary holds
   (all three: one build for every x86 server); the default is the widest supported.
2. `run --isa NAME` for every ISA this CPU supports: the rows say which path ran (`isa`), the
   check against float64 passes on each, and the meta's cpu_isa agrees; FLASHBENCH_ISA does the same.
3. An ISA this CPU lacks, or a name that is none, is a one-line usage error naming --isa (exit 2).
4. `info --peak` on each ISA: the FMA peak is at least the sgemm rate of the same ISA's kernels (a
   peak below what a product reaches is a loop that spills, not a peak).

usage: tests/cli/isa_cli_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402

ALL = ["scalar", "avx2", "avx512"]
RUN = ["run", "--seq", "37", "--heads", "2", "--head-dim", "13", "--causal", "--variant", "standard,v2",
       "--max-time", "0.02", "--threads", "1", "--format", "json"]


def run(binary, args, env=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def main():
    binary = sys.argv[1]
    info = run(binary, ["info", "--format", "json"])
    check(info.returncode == 0, f"info --format json ({info.stderr.strip()[:200]})")
    if info.returncode != 0:
        return summary()
    isa = json.loads(info.stdout).get("cpu_isa", {})
    supported = isa.get("supported", [])
    check(isa.get("compiled") == ALL, f"the binary holds every ISA's kernels ({isa.get('compiled')})")
    check("scalar" in supported and supported == [name for name in ALL if name in supported],
          f"this CPU supports the scalar path and a prefix of the wider ones ({supported})")
    check(supported and isa.get("active") == supported[-1], f"the default is the widest supported ({isa})")
    check(isa.get("lanes") == (16 if isa.get("active") == "avx512" else 8), f"its vector width ({isa})")

    for name in supported:
        for how, args, env in (("--isa", ["--isa", name], None), ("FLASHBENCH_ISA", [], {"FLASHBENCH_ISA": name})):
            result = run(binary, RUN + args, env)
            ok = result.returncode == 0
            check(ok, f"{how} {name}: runs ({result.stderr.strip()[:200]})")
            if not ok:
                continue
            document = json.loads(result.stdout)
            rows = document["rows"]
            check(rows and all(row.get("isa") == name for row in rows),
                  f"{how} {name}: every row says it ran on {name} ({[row.get('isa') for row in rows]})")
            check(all(row["status"] == "ok" and row["check"]["passed"] for row in rows),
                  f"{how} {name}: every row passes its float64 check ({[row['status'] for row in rows]})")
            check(document["meta"].get("cpu_isa", {}).get("active") == name, f"{how} {name}: the meta agrees")

    for name in ALL:
        if name in supported:
            continue
        result = run(binary, RUN + ["--isa", name])
        lines = result.stderr.strip().splitlines()
        check(result.returncode == 2 and len(lines) == 1 and "--isa" in lines[0] and name in lines[0],
              f"--isa {name} on a CPU without it: one line naming --isa, exit 2 ({result.returncode}: {lines[:2]})")
    result = run(binary, RUN + ["--isa", "sse9"])
    lines = result.stderr.strip().splitlines()
    check(result.returncode == 2 and len(lines) == 1 and "sse9" in lines[0] and "avx2" in lines[0],
          f"--isa sse9: one line naming the choices, exit 2 ({result.returncode}: {lines[:2]})")

    for name in supported:
        result = run(binary, ["info", "--peak", "--peak-size", "384", "--threads", "1", "--isa", name,
                              "--format", "json"])
        check(result.returncode == 0, f"info --peak --isa {name} ({result.stderr.strip()[:200]})")
        if result.returncode != 0:
            continue
        peak = json.loads(result.stdout)["peak"]
        check(peak["simd"] == name, f"info --peak --isa {name}: measured on {peak['simd']}")
        # The loop's best repetition against the product's median: a product cannot outrun the FMA
        # units, so a peak under it is the measurement failing, not the machine.
        check(peak["fma_gflops_best"] >= peak["sgemm_gflops"],
              f"--isa {name}: FMA peak {peak['fma_gflops_best']:.1f} >= sgemm {peak['sgemm_gflops']:.1f} GFLOP/s")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
