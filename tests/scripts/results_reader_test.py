"""scripts/results.py, the one reader of results files that plot.py and cpu_table.py share: .json and .jsonl read alike, and bad input is one ResultsError line naming
the file, which each script prints as one line on stderr with exit status 2.

Run by CTest as: python3 tests/scripts/results_reader_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary is not needed).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPTS = os.path.join(SOURCE_DIR, "scripts")
sys.path.insert(0, SCRIPTS)
import results  # noqa: E402

ROW = {"backend": "cpu", "variant": "v2", "problem": {"batch": 1, "heads": 2, "seq": 64, "head_dim": 8,
                                                       "layers": 1, "causal": False, "dtype": "fp32"},
       "status": "ok", "timing": {"fwd": {"median_ms": 2.0}, "bwd": {"median_ms": 5.0}},
       "throughput": {"fwd_tflops": 0.25, "bwd_tflops": 0.3}}


def write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


class ReaderTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_json_and_jsonl_read_alike(self):
        meta = {"tool": "flashbench"}
        document = write(self.dir, "a.json", json.dumps({"schema_version": 3, "meta": meta, "rows": [ROW, ROW],
                                                         "summary": {"rows": 2}}))
        stream = write(self.dir, "a.jsonl", "\n".join(json.dumps(r) for r in (
            {"schema_version": 3, "meta": meta}, ROW, ROW, {"summary": {"rows": 2}})) + "\n\n")
        for path in (document, stream):
            read = results.read_results(path)
            self.assertEqual(read.schema_version, 3, path)
            self.assertEqual(read.meta, meta, path)
            self.assertEqual(read.rows, [ROW, ROW], path)
        empty = results.read_results(write(self.dir, "empty.jsonl", ""))
        self.assertEqual((empty.schema_version, empty.meta, empty.rows), (None, {}, []))

    def test_committed_files_read(self):
        for name in ("tests/data/cpu-small.json", "tests/data/peer-sdpa-h200.jsonl",
                     "tests/data/cpu-2core/flashbench.json", "tests/data/cpu-2core/torch-cpu.json"):
            read = results.read_results(os.path.join(SOURCE_DIR, name))
            self.assertEqual(read.schema_version, 1, name)
            self.assertTrue(read.rows, name)

    def test_row_helpers(self):
        self.assertEqual(results.gflops(ROW, "fwd"), 250.0)  # 1000 x the row's TFLOP/s
        self.assertEqual(results.gflops(ROW, "bwd"), 300.0)
        self.assertIsNone(results.gflops({"throughput": {"fwd_tflops": None}}, "fwd"))
        self.assertEqual(results.median_ms(ROW, "bwd"), 5.0)
        self.assertEqual(results.impl_of(ROW), "v2")
        self.assertEqual(results.impl_of(dict(ROW, impl="v2.split")), "v2.split")
        self.assertFalse(results.is_peer(ROW))
        self.assertFalse(results.is_peer(dict(ROW, backend="cuda")))
        self.assertTrue(results.is_peer(dict(ROW, backend="torch-sdpa-flash")))

    def bad_inputs(self):
        d = self.dir
        return {
            "missing": os.path.join(d, "missing.json"),
            "not JSON": write(d, "garbage.json", "{not json"),
            "no rows": write(d, "other.json", json.dumps({"hello": 1})),
            "a list": write(d, "list.json", json.dumps([ROW])),
            "rows not a list": write(d, "rows.json", json.dumps({"schema_version": 1, "rows": {"a": ROW}})),
            "row not an object": write(d, "row.json", json.dumps({"schema_version": 1, "rows": [ROW, 3]})),
            "bad line": write(d, "bad.jsonl", json.dumps({"schema_version": 1, "meta": {}}) + "\n"
                              + json.dumps(ROW) + "\n" + json.dumps(ROW)[:40] + "\n"),
            "line not an object": write(d, "array.jsonl", "[1, 2]\n"),
            "not UTF-8": os.path.join(d, "binary.json"),
        }

    def test_bad_input_is_one_line_naming_the_file(self):
        inputs = self.bad_inputs()
        with open(inputs["not UTF-8"], "wb") as handle:
            handle.write(b"\xff\xfe\x00{")
        for what, path in inputs.items():
            with self.assertRaises(results.ResultsError, msg=what) as caught:
                results.read_results(path)
            message = str(caught.exception)
            self.assertIn(path, message, what)
            self.assertNotIn("\n", message, what)
        with self.assertRaises(results.ResultsError) as caught:
            results.read_results(inputs["bad line"])
        self.assertIn("line 3", str(caught.exception))

    def test_every_script_reads_through_it(self):
        """plot.py has no reader of its own, and its bad-input error is one stderr line, exit 2."""
        import plot
        self.assertIs(plot.read_results, results.read_results)
        bad = self.bad_inputs()["not JSON"]
        command = [os.path.join(SCRIPTS, "plot.py"), bad, "--dump-series"]
        result = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 2, command)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertIn("is not JSON", result.stderr)
        self.assertIn(bad, result.stderr)

if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
