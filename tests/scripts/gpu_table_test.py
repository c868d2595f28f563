"""scripts/gpu_table.py on an H200 run kept as a fixture in tests/data/h200-w3 (round w3): every cell it prints comes
from the files (the v2 medians and rate are the rows' own, the ratios are the peers' backward time
over v2's), shapes are sorted by d, N and mask, --summary gives each head dim's ranges over the
shapes with N ≥ --min-n, and an unreadable file is one line on stderr with exit status 2.

Run by CTest as: python3 tests/scripts/gpu_table_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary is not needed).
"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
RUN = os.path.join(SOURCE_DIR, "tests", "data", "h200-w3")
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
import gpu_table  # noqa: E402


def rows_of(name):
    with open(os.path.join(RUN, name), encoding="utf-8") as handle:
        if name.endswith(".json"):
            return json.load(handle)["rows"]
        return [row for row in map(json.loads, handle) if "status" in row]


def render(paths):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = gpu_table.main(paths)
    return status, out.getvalue(), err.getvalue()


class GpuTableTest(unittest.TestCase):
    files = ["bf16-d128-n16384-true.jsonl", "bf16-d64-n4096-false.jsonl", "peers-bf16-d128.json",
             "peers-bf16-d64.json"]

    def setUp(self):
        status, self.text, _ = render([os.path.join(RUN, name) for name in self.files])
        self.assertEqual(status, 0)
        self.lines = [line for line in self.text.splitlines() if line.startswith("| 1") or line.startswith("| 6")]

    def cells(self, d, n, causal):
        for line in self.lines:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if cells[:3] == [str(d), str(n), "yes" if causal else "no"]:
                return cells
        self.fail(f"no line for d={d} N={n} causal={causal} in:\n{self.text}")

    def test_cells_come_from_the_rows(self):
        ours = next(row for row in rows_of("bf16-d128-n16384-true.jsonl") if row["impl"] == "v2")
        peers = {row["backend"]: row for row in rows_of("peers-bf16-d128.json")
                 if row["problem"]["seq"] == 16384 and row["problem"]["causal"]}
        cells = self.cells(128, 16384, True)
        self.assertEqual(cells[3], f"{ours['timing']['fwd']['median_ms']:.3f}")
        self.assertEqual(cells[6], f"{ours['timing']['bwd']['median_ms']:.3f}")
        self.assertEqual(cells[7], f"{ours['throughput']['bwd_tflops']:.0f}")
        flash_bwd = peers["torch-sdpa-flash"]["timing"]["bwd"]["median_ms"]
        cudnn_bwd = peers["torch-sdpa-cudnn"]["timing"]["bwd"]["median_ms"]
        self.assertEqual(cells[8], f"{flash_bwd:.3f}")
        self.assertEqual(cells[10], f"{flash_bwd / ours['timing']['bwd']['median_ms']:.2f}")
        self.assertEqual(cells[11], f"{cudnn_bwd / ours['timing']['bwd']['median_ms']:.2f}")
        measured = ours["memory"]["measured"]
        self.assertEqual(cells[14], f"{(measured['peak_bytes'] - measured['by_tag']['input']) / 2**30:.2f}")
        self.assertEqual(cells[12], "–")  # no cudnn (ours) row in these files

    def test_the_cudnn_versions_are_named_and_a_difference_said(self):
        def row(name, **extra):
            return {"impl": name, "backend": "cuda", "status": "ok",
                    "problem": {"head_dim": 128, "seq": 4096, "causal": False},
                    "timing": {"fwd": {"median_ms": 1.0}, "bwd": {"median_ms": 2.0}}, **extra}
        ours = [row("v2", driver="13.0"), row("cudnn", library="cuDNN 9.12.0", driver="13.0")]
        peer = dict(row("torch-sdpa-cudnn", provenance={"cudnn": 91002, "driver_version": "13.0"}),
                    backend="torch-sdpa-cudnn")
        with tempfile.TemporaryDirectory() as tmp:
            for name, rows in (("ours.json", ours), ("peers.json", [peer])):
                with open(os.path.join(tmp, name), "w", encoding="utf-8") as handle:
                    json.dump({"schema_version": 1, "meta": {}, "rows": rows}, handle)
            status, text, _ = render([os.path.join(tmp, "ours.json"), os.path.join(tmp, "peers.json")])
        self.assertEqual(status, 0)
        self.assertIn("Ran on: cudnn (ours): cuDNN 9.12.0; torch cuDNN: cuDNN 9.10.2; driver 13.0", text)
        self.assertIn("different cuDNN versions (cuDNN 9.12.0 against cuDNN 9.10.2)", text)
        # The fixture's rows predate the fields: nothing to name, nothing said.
        self.assertNotIn("different cuDNN", self.text)

    def test_a_throttled_phase_is_marked(self):
        self.assertNotIn("†", self.text)  # the fixture's rows predate the count
        ours = next(row for row in rows_of("bf16-d128-n16384-true.jsonl") if row["impl"] == "v2")
        marked = json.loads(json.dumps(ours))
        marked["timing"]["bwd"]["throttled_samples"] = 3
        marked["timing"]["fwd"]["throttled_samples"] = 0
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "rows.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(marked) + "\n")
            status, text, _ = render([path])
        self.assertEqual(status, 0)
        line = next(line for line in text.splitlines() if line.startswith("| 128 | 16384 | yes"))
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        self.assertEqual(cells[3], f"{ours['timing']['fwd']['median_ms']:.3f}")
        self.assertEqual(cells[6], f"{ours['timing']['bwd']['median_ms']:.3f}†")
        self.assertIn("† some samples ran with the GPU throttled", text)

    def test_only_shapes_with_a_v2_row_sorted_by_head_dim_then_n(self):
        self.assertEqual(len(self.lines), 2)
        self.assertTrue(self.lines[0].startswith("| 64 | 4096 | no"))
        self.assertTrue(self.lines[1].startswith("| 128 | 16384 | yes"))

    def test_cold_rows_stay_out_of_the_table_and_pair_with_warm_ones_in_warm_cold(self):
        ours = next(row for row in rows_of("bf16-d128-n16384-true.jsonl") if row["impl"] == "v2")
        cold = json.loads(json.dumps(ours))
        cold["cold"] = True
        cold["timing"]["fwd"]["median_ms"] = 2 * ours["timing"]["fwd"]["median_ms"]
        cold["timing"]["bwd"]["median_ms"] = 1.5 * ours["timing"]["bwd"]["median_ms"]
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "cold.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(cold) + "\n")
            files = [os.path.join(RUN, "bf16-d128-n16384-true.jsonl"), path]
            status, text, _ = render(files)
            self.assertEqual(status, 0)
            line = next(l for l in text.splitlines() if l.startswith("| 128 | 16384 | yes"))
            self.assertEqual(line.split("|")[4].strip(), f"{ours['timing']['fwd']['median_ms']:.3f}")  # the warm row
            status, text, _ = render(files + ["--warm-cold"])
        self.assertEqual(status, 0)
        line = next(l for l in text.splitlines() if l.startswith("| v2 | 128 | 16384 | yes"))
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        self.assertEqual(cells[4:8], [f"{ours['timing']['fwd']['median_ms']:.3f}",
                                      f"{2 * ours['timing']['fwd']['median_ms']:.3f}",
                                      f"{ours['timing']['bwd']['median_ms']:.3f}",
                                      f"{1.5 * ours['timing']['bwd']['median_ms']:.3f}"])
        self.assertEqual(cells[8], "1.50")
        # A shape with only a warm row has no line.
        self.assertFalse(any(l.startswith("| v2 | 64 |") for l in text.splitlines()))

    def test_summary_gives_the_ranges_per_head_dim_over_n_at_least_min_n(self):
        gib = 2 ** 30

        def row(name, d, n, causal, fwd, bwd, status="ok", rates=None, peak=None):
            problem = {"batch": 1, "heads": 16, "seq": n, "head_dim": d, "layers": 1, "causal": causal,
                       "dtype": "bf16"}
            peer = name.startswith("torch")
            result = {"backend": name if peer else "cuda", "variant": "v2", "problem": problem, "status": status,
                      "timing": {"fwd": {"median_ms": fwd}, "bwd": {"median_ms": bwd}}}
            if not peer:
                result["impl"] = name
            if rates:
                result["throughput"] = {"fwd_tflops": rates[0], "bwd_tflops": rates[1]}
            if peak:
                result["memory"] = {"measured": {"peak_bytes": peak[0] * gib, "by_tag": {"input": peak[1] * gib}}}
            return result

        rows = [
            # N = 1024: left out by --min-n 2048 (its ratios would widen every range)
            row("v2", 64, 1024, False, 1.0, 1.0, rates=(100, 100), peak=(3, 1)),
            row("torch-sdpa-flash", 64, 1024, False, 9.0, 9.0),
            row("v2", 64, 2048, False, 1.0, 2.0, rates=(400, 300), peak=(3, 1)),
            row("torch-sdpa-flash", 64, 2048, False, 1.5, 3.0),
            row("torch-sdpa-cudnn", 64, 2048, False, 0.8, 1.8, peak=(5, 1)),
            row("standard", 64, 2048, False, 2.0, 5.0),
            row("v2", 64, 4096, True, 2.0, 4.0, rates=(410, 350), peak=(3, 1)),
            row("torch-sdpa-flash", 64, 4096, True, 2.6, 4.4),
            row("torch-sdpa-cudnn", 64, 4096, True, 0.5, 0.5, status="oom", peak=(9, 1)),  # out of its ranges
            row("standard", 64, 4096, True, 3.0, 12.0),
            row("cudnn", 64, 4096, True, 1.0, 1.0, status="failed"),  # its times are no result either
            # d = 128: ours did not run, so no line
            row("v2", 128, 4096, False, 0.0, 0.0, status="oom"),
            row("torch-sdpa-flash", 128, 4096, False, 1.0, 1.0),
        ]
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "sweep.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump({"schema_version": 1, "meta": {}, "rows": rows}, handle)
            status, text, err = render([path, "--summary", "--min-n", "2048"])
        self.assertEqual(status, 0, err)
        lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| d ")]
        self.assertEqual(len(lines), 1, text)
        cells = [cell.strip() for cell in lines[0].strip("|").split("|")]
        self.assertEqual(cells, ["64", "2", "2048–4096",
                                 "1.10–1.50",  # bwd: FA2 ÷ ours, 3.0/2.0 and 4.4/4.0
                                 "0.90",       # bwd: cuDNN ÷ ours, the oom row left out
                                 "1.30–1.50",  # fwd: FA2 ÷ ours, 2.6/2.0 and 1.5/1.0
                                 "0.80",
                                 "–",          # no flashbench cudnn rows
                                 "300–350", "400–410",
                                 "0.50",       # peak beyond the inputs, (3 − 1)/(5 − 1)
                                 "2.50–3.00"])  # standard's backward over ours

    def test_min_n_goes_with_summary(self):
        with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as exit_:
            gpu_table.main([os.path.join(RUN, self.files[0]), "--min-n", "2048"])
        self.assertEqual(exit_.exception.code, 2)
        self.assertIn("--min-n goes with --summary", err.getvalue())

    def test_unreadable_file_is_one_line_and_status_2(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "broken.json")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("{not json")
            status, out, err = render([path])
        self.assertEqual(status, 2)
        self.assertEqual(out, "")
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("broken.json", err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
