"""scripts/ncu_stalls.py on small source pages written here: reasons by share, the instructions that
hold them, gzip input, and one-line errors with status 2 for what is not ncu's source page."""
import gzip
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(sys.argv[2]) / "scripts" / "ncu_stalls.py"

PAGE = """==PROF== Connected to process 1 (flashbench)
v2       3.33 ms  8.93 ms
"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","stall_wait","stall_barrier (Not Issued)"
"0x10","HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24","20","0","20","0"
"0x20","WARPGROUP.DEPBAR.LE gsb0, 0x0","60","50","10","49"
"0x30","FMNMX R11, R25, R12, !PT","20","10","-","0"
"""


class NcuStalls(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def run_script(self, *args):
        return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)

    def test_reasons_and_their_instructions(self):
        page = self.dir / "sass.csv"
        page.write_text(PAGE)
        result = self.run_script(page, "--top", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], "3 instructions, 100 warp-state samples")
        # barrier (60) before wait (30); the "(Not Issued)" column is not a reason of its own
        self.assertLess(lines.index("| barrier | 60 | 60.0 % |"), lines.index("| wait | 30 | 30.0 % |"))
        self.assertFalse(any("Not Issued" in line for line in lines))
        barrier = lines.index("**barrier**: the 2 instructions with most of its samples")
        self.assertIn("`WARPGROUP.DEPBAR.LE gsb0, 0x0` | 50 | 50.0 %", lines[barrier + 4])
        self.assertIn("`FMNMX R11, R25, R12, !PT` | 10 | 10.0 %", lines[barrier + 5])

    def test_gzip_reads_the_same(self):
        plain, packed = self.dir / "sass.csv", self.dir / "sass.csv.gz"
        plain.write_text(PAGE)
        with gzip.open(packed, "wt") as f:
            f.write(PAGE)
        self.assertEqual(self.run_script(plain).stdout, self.run_script(packed).stdout)

    def test_not_a_source_page(self):
        cases = {
            "report.txt": "    Section: Warp State Statistics\n",
            "empty.csv": '"Address","Source","Warp Stall Sampling (All Samples)"\n',
            "no-samples.csv": '"Address","Source"\n"0x10","NOP"\n',
        }
        for name, text in cases.items():
            (self.dir / name).write_text(text)
            result = self.run_script(self.dir / name)
            self.assertEqual(result.returncode, 2, name)
            self.assertEqual(len(result.stderr.strip().splitlines()), 1, (name, result.stderr))
            self.assertTrue(result.stderr.startswith("ncu_stalls.py: "), result.stderr)
        result = self.run_script(self.dir / "missing.csv")
        self.assertEqual(result.returncode, 2)
        self.assertIn("cannot read", result.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
