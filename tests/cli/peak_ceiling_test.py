#!/usr/bin/env python3
"""`info --peak` says which sgemm ceiling "% of peak" is read against: OpenBLAS's or flashbench's own
gemm, whichever is faster, and its own gemm alone (named so) in a build without OpenBLAS or where
OpenBLAS's kernels are wider than the run's (--isa). Where
Debian's OpenBLAS headers are installed (libopenblas-dev, which scripts/setup.sh installs), the
build must have found them.

usage: tests/cli/peak_ceiling_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402
PEAK = ["info", "--peak", "--peak-size", "256", "--threads", "1"]


def main():
    binary = sys.argv[1]
    result = subprocess.run([binary, *PEAK, "--format", "json"], capture_output=True, text=True, timeout=300)
    check(result.returncode == 0, f"info --peak --format json exits 0 {result.stderr.strip()}")
    peak = json.loads(result.stdout)["peak"]
    ours, blas = peak["sgemm_gflops"], peak["openblas_sgemm_gflops"]
    print(f"flashbench gemm {ours:.1f} GFLOP/s, OpenBLAS {blas}, ceiling {peak['sgemm_ceiling_gflops']:.1f} "
          f"from {peak['sgemm_ceiling_from']}")
    comparable = None if "openblas_left_out" in peak else blas
    check(peak["sgemm_ceiling_gflops"] == max(ours, comparable or 0), "the ceiling is the faster comparable sgemm")
    check(peak["sgemm_ceiling_from"] == ("openblas" if comparable is not None and comparable > ours else "flashbench"),
          "sgemm_ceiling_from names whose it is")

    # Kernels forced narrower than OpenBLAS's (scalar against any SIMD family): its rate is left out
    # of their ceiling, and the table says why.
    if blas is not None and peak["openblas_core"].lower() in ("haswell", "zen", "skylake", "skylakex", "cooperlake",
                                                              "sapphirerapids"):
        scalar = json.loads(subprocess.run([binary, *PEAK, "--isa", "scalar", "--format", "json"], capture_output=True,
                                           text=True, timeout=300).stdout)["peak"]
        check("wider than the run's scalar kernels" in scalar.get("openblas_left_out", "") and
              scalar["sgemm_ceiling_gflops"] == scalar["sgemm_gflops"] and scalar["sgemm_ceiling_from"] == "flashbench",
              f"--isa scalar: OpenBLAS's {peak['openblas_core']} rate left out of the ceiling: {scalar.get('openblas_left_out')}")
    if Path("/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h").exists():
        check(blas is not None and peak["openblas_core"] != "", "OpenBLAS's headers are here: the build uses them")

    # The table is a second measurement: the two gemms can be within a few % of each other, and which
    # is faster can change between runs on a loaded machine, so the line is judged by the rates this
    # same run printed above it.
    text = subprocess.run([binary, *PEAK], capture_output=True, text=True, timeout=300).stdout
    lines = text.splitlines()
    line = next((l for l in lines if l.startswith("ceiling ")), "")
    if blas is None:
        check("flashbench's own gemm" in line and "libopenblas-dev" in line, f"no OpenBLAS, and it says so: {line!r}")
    else:
        text_ours = rate_on(lines, "sgemm peak ")
        text_blas = rate_on(lines, "OpenBLAS ")
        both = text_ours is not None and text_blas is not None
        check(both, "the table prints both sgemm rates" + ("" if both else f": {text!r}"))
        if both:
            # Rates printed equal (rounded) leave either name right.
            named_blas, named_ours = "OpenBLAS's" in line, "flashbench's gemm" in line
            right = named_blas if text_blas > text_ours else named_ours if text_ours > text_blas else named_blas or named_ours
            check(right, f"the ceiling named ({text_ours:g} against OpenBLAS's {text_blas:g} GFLOP/s): {line!r}")
    return summary()


def rate_on(lines, prefix):
    """The GFLOP/s number of the first line starting with `prefix` ("sgemm peak   185 GFLOP/s ...")."""
    for line in lines:
        if line.startswith(prefix):
            words = line[len(prefix):].split()
            if len(words) >= 2 and words[1] == "GFLOP/s":
                try:
                    return float(words[0])
                except ValueError:
                    return None
    return None


if __name__ == "__main__":
    sys.exit(main())
