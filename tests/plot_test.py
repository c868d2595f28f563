"""scripts/plot.py on the small results files in tests/data: every figure is written as a real
PNG (and SVG), the series are what the rows say, and bad input fails with the documented codes.

Run by CTest as: python3 plot_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary is not needed).
The plot script itself runs under a Python that has matplotlib: this one, or Debian's
/usr/bin/python3 (python3-matplotlib).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..")
PLOT = os.path.join(SOURCE_DIR, "scripts", "plot.py")
CPU = os.path.join(SOURCE_DIR, "tests", "data", "cpu-small.json")
PEER = os.path.join(SOURCE_DIR, "tests", "data", "peer-sdpa-h200.jsonl")
FIGURES = ["time_vs_seq", "memory_vs_seq", "throughput_vs_seq", "memory_by_tag", "bwd_over_fwd"]


def python_with_matplotlib():
    for candidate in (sys.executable, "/usr/bin/python3"):
        if candidate and os.path.exists(candidate):
            probe = subprocess.run([candidate, "-c", "import matplotlib, numpy"], capture_output=True)
            if probe.returncode == 0:
                return candidate
    raise RuntimeError("no python3 with matplotlib and numpy (install python3-matplotlib)")


PYTHON = python_with_matplotlib()


def plot(*arguments):
    return subprocess.run([PYTHON, PLOT, *arguments], capture_output=True, text=True, timeout=240)


class PlotTest(unittest.TestCase):
    def test_labels_carry_the_workload_axes(self):
        sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
        import plot as plot_module  # pylint: disable=import-outside-toplevel
        base = {"batch": 1, "heads": 32, "kv_heads": 32, "seq": 1024, "seq_k": 1024, "head_dim": 64, "layers": 1,
                "causal": True, "dropout": 0.0, "expand_kv": False, "dtype": "fp32"}
        self.assertEqual(plot_module.shape_of(base), "B=1 H=32 d=64 L=1 causal fp32")
        gqa = dict(base, kv_heads=8, seq_k=4096, expand_kv=True, dropout=0.1)
        self.assertEqual(plot_module.shape_of(gqa), "B=1 H=32 G=8 d=64 L=1 causal Nk=4096 expand-kv dropout=0.1 fp32")
        old = {key: base[key] for key in ("batch", "heads", "seq", "head_dim", "layers", "causal", "dtype")}
        self.assertEqual(plot_module.shape_of(old), "B=1 H=32 d=64 L=1 causal fp32")  # files before these axes

    def test_writes_every_figure_as_png_and_svg(self):
        with tempfile.TemporaryDirectory() as out:
            result = plot(CPU, PEER, "--out", out, "--svg")
            self.assertEqual(result.returncode, 0, result.stderr)
            for name in FIGURES:
                png = os.path.join(out, name + ".png")
                with open(png, "rb") as handle:
                    self.assertEqual(handle.read(8), b"\x89PNG\r\n\x1a\n", png)
                self.assertGreater(os.path.getsize(png), 10_000, png)
                with open(os.path.join(out, name + ".svg"), encoding="utf-8") as handle:
                    self.assertIn("<svg", handle.read(2000))
            self.assertEqual(sorted(result.stdout.split()),
                             sorted(os.path.join(out, f"{n}.{e}") for n in FIGURES for e in ("png", "svg")))

    def test_series_follow_the_rows(self):
        result = plot(CPU, PEER, "--dump-series")
        self.assertEqual(result.returncode, 0, result.stderr)
        dumped = json.loads(result.stdout)
        self.assertEqual(dumped["sources"], ["cpu", "torch-sdpa-math", "torch-sdpa-flash"])
        series = {(s["source"], s["variant"]): s for s in dumped["series"]}
        with open(CPU, encoding="utf-8") as handle:
            rows = json.load(handle)["rows"]
        for variant in ("standard", "v1", "v2", "checkpoint"):
            ok = sorted(r["problem"]["seq"] for r in rows if r["variant"] == variant and r["status"] == "ok")
            self.assertEqual([p["seq"] for p in series[("cpu", variant)]["points"]], ok, variant)
        v2 = [r for r in rows if r["variant"] == "v2" and r["status"] == "ok"]
        first = min(v2, key=lambda r: r["problem"]["seq"])
        point = series[("cpu", "v2")]["points"][0]
        self.assertEqual(point["fwd_ms"], first["timing"]["fwd"]["median_ms"])
        self.assertEqual(point["peak_bytes"], first["memory"]["measured"]["peak_bytes"])
        self.assertEqual(point["model_peak_bytes"], first["memory"]["model"]["peak_bytes"])
        # The peer scales its batch with N at 16k tokens: one series, labelled so.
        flash = series[("torch-sdpa-flash", "v2")]
        self.assertEqual([p["seq"] for p in flash["points"]], [512, 1024, 2048, 4096])
        self.assertTrue(flash["shape"].startswith("B*N=16384 "), flash["shape"])

    def test_bad_input(self):
        with tempfile.TemporaryDirectory() as out:
            self.assertEqual(plot(os.path.join(out, "missing.json"), "--out", out).returncode, 2)
            not_results = os.path.join(out, "other.json")
            with open(not_results, "w", encoding="utf-8") as handle:
                json.dump({"hello": 1}, handle)
            self.assertEqual(plot(not_results, "--out", out).returncode, 2)
            nothing_ok = os.path.join(out, "oom.json")
            with open(nothing_ok, "w", encoding="utf-8") as handle:
                json.dump({"schema_version": 1, "meta": {}, "rows": [
                    {"backend": "cpu", "variant": "standard", "status": "oom", "reason": "too big",
                     "problem": {"batch": 1, "heads": 1, "seq": 64, "head_dim": 8}}]}, handle)
            result = plot(nothing_ok, "--out", out)
            self.assertEqual(result.returncode, 1)
            self.assertIn("no ok rows", result.stderr)
            self.assertEqual(plot(CPU).returncode, 2)  # no --out


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
