"""scripts/cpu_table.py on a CPU benchmark kept as a fixture in tests/data/cpu-2core: the rates it prints are
the rows' own throughput (GFLOP/s = 1000 x TFLOP/s), the % of peak and the ratios against the
PyTorch peer follow from the files, they agree with the table.txt committed beside them, rows that
name an "impl" are shown by it, and unreadable files are one line on stderr with exit status 2.

Run by CTest as: python3 tests/scripts/cpu_table_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary is not needed).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPTS = os.path.join(SOURCE_DIR, "scripts")
RUN = os.path.join(SOURCE_DIR, "tests", "data", "cpu-2core")
sys.path.insert(0, SCRIPTS)
import cpu_table  # noqa: E402


def load(name, folder=RUN):
    with open(os.path.join(folder, name), encoding="utf-8") as handle:
        return json.load(handle)


def table_rows(lines):
    """{(name, N, d, causal): [fwd GF/s, fwd %pk, fwd vs, bwd GF/s, bwd %pk, bwd vs, bwd/fwd]} of the main table."""
    parsed = {}
    for line in lines:
        parts = line.split("|")
        if len(parts) != 4 or "GF/s" in line:
            continue
        name, n, d, causal = parts[0].split()
        cells = parts[1].split() + parts[2].split() + parts[3].split()
        parsed[(name, int(n), int(d), causal)] = cells
    return parsed


def ceiling():
    peaks = [load(f"peak-{phase}.json")["peak"] for phase in ("before", "between", "after")]
    return max(max(p["sgemm_gflops"], p["openblas_sgemm_gflops"] or 0) for p in peaks)


class CpuTableTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lines = cpu_table.table(RUN)
        cls.rows = table_rows(cls.lines)
        cls.ours = [r for r in load("flashbench.json")["rows"] if r["status"] == "ok"]
        cls.peer = [r for r in load("torch-cpu.json")["rows"] if r["status"] == "ok"]

    def key(self, row, name=None):
        p = row["problem"]
        return (name or row["variant"], p["seq"], p["head_dim"], str(p["causal"]).lower())

    def test_every_row_once(self):
        self.assertEqual(len(self.rows), len(self.ours) + len(self.peer))
        for row in self.ours:
            self.assertIn(self.key(row), self.rows)
        for row in self.peer:
            self.assertIn(self.key(row, "torch-cpu-standard"), self.rows)

    def test_rates_are_the_rows_throughput(self):
        peak = ceiling()
        peer = {self.key(r, "x")[1:]: r for r in self.peer}
        for row in self.ours:
            cells = self.rows[self.key(row)]
            ref = peer[self.key(row)[1:]]
            for phase, at in (("fwd", 0), ("bwd", 3)):
                rate = 1000 * row["throughput"][f"{phase}_tflops"]
                self.assertEqual(cells[at], f"{rate:.1f}", (self.key(row), phase))
                self.assertEqual(cells[at + 1], f"{100 * rate / peak:.0f}", (self.key(row), phase))
                ratio = ref["timing"][phase]["median_ms"] / row["timing"][phase]["median_ms"]
                self.assertEqual(cells[at + 2], f"{ratio:.2f}x", (self.key(row), phase))
            self.assertEqual(cells[6], f"{row['bwd_over_fwd']:.2f}")
        for row in self.peer:
            cells = self.rows[self.key(row, "torch-cpu-standard")]
            self.assertEqual(cells[0], f"{1000 * row['throughput']['fwd_tflops']:.1f}")
            self.assertEqual(cells[3], f"{1000 * row['throughput']['bwd_tflops']:.1f}")
            self.assertEqual((cells[2], cells[5]), ("-", "-"))

    def test_a_few_numbers_by_hand(self):
        # v2, N=2048, d=64, not causal: 0.2420 TFLOP/s forward in flashbench.json.
        v2 = next(r for r in self.ours if self.key(r) == ("v2", 2048, 64, "false"))
        self.assertAlmostEqual(v2["throughput"]["fwd_tflops"], 0.2420, places=4)
        self.assertEqual(self.rows[("v2", 2048, 64, "false")][0], "242.0")
        self.assertEqual(self.rows[("torch-cpu-standard", 2048, 64, "false")][0], "44.5")

    def test_agrees_with_the_committed_table(self):
        """table.txt was printed by the former in-script formula; the rows' throughput gives the same figures."""
        with open(os.path.join(RUN, "table.txt"), encoding="utf-8") as handle:
            committed = table_rows(handle.read().splitlines())
        self.assertEqual(len(committed), len(self.rows))
        for (name, n, d, causal), cells in committed.items():
            name = "torch-cpu-standard" if name == "torch" else name
            self.assertEqual(self.rows[(name, n, d, causal)], cells, (name, n, d, causal))

    def test_causal_pairs_and_scaling(self):
        text = "\n".join(self.lines)
        ratios = []
        for r in range(1, 6):
            rows = load(f"causal-n2048-d64-r{r}.json")["rows"]
            by = {row["problem"]["causal"]: row for row in rows}
            ratios.append(by[True]["throughput"]["bwd_tflops"] / by[False]["throughput"]["bwd_tflops"])
        self.assertIn(f"N=2048   d=64   bwd: {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]"
                      " over 5 pairs", text)
        one = {r["variant"]: r for r in load("scaling-t1.json")["rows"]}
        two = {r["variant"]: r for r in load("scaling-t2.json")["rows"]}
        g1, g2 = 1000 * one["v2"]["throughput"]["fwd_tflops"], 1000 * two["v2"]["throughput"]["fwd_tflops"]
        self.assertIn(f"v2       fwd: 1T {g1:.0f} (100%), 2T {g2:.0f} ({100 * g2 / g1 / 2:.0f}%)", text)

    def test_impl_is_shown_when_rows_name_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = os.path.join(tmp, "run")
            shutil.copytree(RUN, run)
            document = load("flashbench.json", run)
            for row in document["rows"]:
                if row["variant"] == "v2":
                    row["impl"] = "v2.split"
            with open(os.path.join(run, "flashbench.json"), "w", encoding="utf-8") as handle:
                json.dump(document, handle)
            lines = cpu_table.table(run)
        self.assertTrue(any(line.startswith("impl ") for line in lines))
        rows = table_rows(lines)
        self.assertEqual(rows[("v2.split", 2048, 64, "false")], self.rows[("v2", 2048, 64, "false")])
        self.assertNotIn(("v2", 2048, 64, "false"), rows)
        self.assertIn(("standard", 2048, 64, "false"), rows)  # no impl: the variant

    def test_cli(self):
        script = os.path.join(SCRIPTS, "cpu_table.py")
        result = subprocess.run([sys.executable, script, RUN], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines(), self.lines)
        with tempfile.TemporaryDirectory() as tmp:
            missing = subprocess.run([sys.executable, script, tmp], capture_output=True, text=True, timeout=60)
            self.assertEqual(missing.returncode, 2)
            self.assertEqual(len(missing.stderr.splitlines()), 1, missing.stderr)
            self.assertIn("peak-before.json", missing.stderr)
            run = os.path.join(tmp, "run")
            shutil.copytree(RUN, run)
            with open(os.path.join(run, "flashbench.json"), "w", encoding="utf-8") as handle:
                handle.write('{"schema_version": 1, "rows": [')
            broken = subprocess.run([sys.executable, script, run], capture_output=True, text=True, timeout=60)
            self.assertEqual(broken.returncode, 2)
            self.assertEqual(len(broken.stderr.splitlines()), 1, broken.stderr)
            self.assertIn("flashbench.json' is not JSON", broken.stderr)
        self.assertEqual(subprocess.run([sys.executable, script], capture_output=True, timeout=60).returncode, 2)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
