#!/usr/bin/env python3
"""scripts/gpu-ncu.sh without a GPU or Nsight Compute: a fake ncu on PATH records what it is asked
and prints a report (or that it read nothing). The script reads one launch of the named kernel with
the clocks left alone, runs flashbench with --profile and --no-check (the default run when none is
given), writes the report and the command, and says in one line, with its exit status, what is
missing or went wrong: usage 2, no ncu 3, nothing read 1.

usage: tests/scripts/gpu_ncu_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import os
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(sys.argv[2]) / "scripts" / "gpu-ncu.sh"

FAKE_NCU = """#!/bin/sh
printf '%s\\n' "$@" >> "$FAKE_NCU_ARGS"
if [ -n "$FAKE_NCU_NOTHING" ]; then echo "==WARNING== No kernels were profiled."; exit 0; fi
case " $* " in *" --page source "*)
  echo "the profiled run's own output"
  echo '"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","stall_wait"'
  echo '"0x10","HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24","30","0","30"'
  echo '"0x20","WARPGROUP.DEPBAR.LE gsb0, 0x0","70","65","5"'
  exit 0;;
esac
echo "  backward_kernel (128, 16, 1)x(256, 1, 1), Context 1, Stream 7"
echo "    Section: Warp State Statistics"
"""


def executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


class GpuNcu(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        (self.dir / "bin").mkdir()
        (self.dir / "build").mkdir()
        executable(self.dir / "bin" / "ncu", FAKE_NCU)
        executable(self.dir / "build" / "flashbench", "#!/bin/sh\nexit 0\n")
        self.env = dict(os.environ, PATH=f"{self.dir / 'bin'}:{os.environ['PATH']}",
                        FAKE_NCU_ARGS=str(self.dir / "args.txt"))

    def tearDown(self):
        self.tmp.cleanup()

    def run_script(self, *args, **env):
        return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                              env=dict(self.env, **env))

    def test_reads_one_launch_with_the_clocks_alone(self):
        out = self.dir / "out"
        result = self.run_script(out, self.dir / "build", "backward_kernel")
        self.assertEqual(result.returncode, 0, result.stderr)
        args = (self.dir / "args.txt").read_text().split("\n")
        self.assertEqual(args[args.index("--clock-control") + 1], "none")
        self.assertEqual(args[args.index("-k") + 1], "regex:backward_kernel")
        self.assertEqual(args[args.index("-c") + 1], "1")
        self.assertIn("WarpStateStats", args)
        run = args[args.index(str(self.dir / "build" / "flashbench")) + 1:]
        self.assertEqual(run[0], "run")
        for expected in ("--impl", "v2", "--head-dim", "128", "--seq", "16384", "--profile", "--no-check"):
            self.assertIn(expected, run)
        self.assertIn("Section:", (out / "ncu.txt").read_text())
        self.assertIn("--clock-control none", (out / "command.txt").read_text())

    def test_run_arguments_replace_the_default(self):
        result = self.run_script(self.dir / "out", self.dir / "build", "forward_kernel", "--backend", "cuda",
                                 "--head-dim", "64", "--seq", "4096")
        self.assertEqual(result.returncode, 0, result.stderr)
        args = (self.dir / "args.txt").read_text().split("\n")
        self.assertNotIn("16384", args)
        self.assertEqual(args[args.index("--head-dim") + 1], "64")

    def test_sections_by_spaces_or_commas(self):
        result = self.run_script(self.dir / "out", self.dir / "build", "k",
                                 NCU_SECTIONS="SpeedOfLight,WarpStateStats LaunchStats")
        self.assertEqual(result.returncode, 0, result.stderr)
        args = (self.dir / "args.txt").read_text().split("\n")
        sections = [args[i + 1] for i, arg in enumerate(args) if arg == "--section"]
        self.assertEqual(sections, ["SpeedOfLight", "WarpStateStats", "LaunchStats"])

    def test_sass_stalls_by_instruction(self):
        out = self.dir / "out"
        result = self.run_script(out, self.dir / "build", "forward_kernel", NCU_SASS="1")
        self.assertEqual(result.returncode, 0, result.stderr)
        args = (self.dir / "args.txt").read_text().split("\n")
        self.assertIn("--page", args)
        self.assertEqual(args[args.index("--print-source") + 1], "sass")
        stalls = (out / "stalls.md").read_text()
        self.assertIn("| barrier | 65 | 65.0 % |", stalls)
        self.assertIn("`WARPGROUP.DEPBAR.LE gsb0, 0x0` | 65 |", stalls)
        self.assertIn("--page source", (out / "command.txt").read_text())

    def test_failures_are_one_line_with_their_status(self):
        cases = [
            ((self.dir / "out",), {}, 2, "usage"),
            ((self.dir / "out", self.dir / "nothing", "k"), {}, 2, "no flashbench"),
            ((self.dir / "out", self.dir / "build", "k"), {"NCU": "no-such-ncu"}, 3, "no Nsight Compute"),
            ((self.dir / "out", self.dir / "build", "k"), {"FAKE_NCU_NOTHING": "1"}, 1, "read no kernel"),
        ]
        for args, env, status, words in cases:
            result = self.run_script(*args, **env)
            self.assertEqual(result.returncode, status, (args, result.stderr))
            self.assertIn(words, result.stderr.strip().splitlines()[-1])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
