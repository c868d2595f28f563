"""scripts/plot.py: every figure is written as a real PNG (and SVG), and what the figures show, read
back through `--describe`, is what the rows say: titles name the device, dtype, d, H, batch, mask
and threads of the rows drawn; bands span the samples; rates use the rows' FLOP counts; speed-ups are
against `standard`; a peer whose tags are partly unknown stands at its measured peak. Bad input and
a Python without matplotlib fail with one line and the documented codes.

The GPU rows are made here (flashbench's `standard` and `v2` and a torch peer with only its input
and kept tags known, as scripts/peers writes them); the CPU rows are tests/data/cpu-small.json.

Run by CTest as: python3 tests/scripts/plot_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary is not needed).
The plot script itself runs under a Python that has matplotlib: this one, or Debian's
/usr/bin/python3 (python3-matplotlib).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")
PLOT = os.path.join(SOURCE_DIR, "scripts", "plot.py")
CPU = os.path.join(SOURCE_DIR, "tests", "data", "cpu-small.json")
PEER = os.path.join(SOURCE_DIR, "tests", "data", "peer-sdpa-h200.jsonl")
FIGURES = ["time_vs_seq", "memory_vs_seq", "throughput_vs_seq", "speedup_vs_seq", "bwd_over_fwd", "memory_by_tag"]
GIB = float(1 << 30)
GPU = "NVIDIA H200"
PEAK_GFLOPS = 250.0  # the CPU rows' sgemm ceiling in the made-up copy


def python_with_matplotlib():
    for candidate in (sys.executable, "/usr/bin/python3"):
        if candidate and os.path.exists(candidate):
            probe = subprocess.run([candidate, "-c", "import matplotlib, numpy"], capture_output=True)
            if probe.returncode == 0:
                return candidate
    raise RuntimeError("no python3 with matplotlib and numpy (install python3-matplotlib)")


PYTHON = python_with_matplotlib()


def plot(*arguments, env=None):
    return subprocess.run([PYTHON, PLOT, *arguments], capture_output=True, text=True, timeout=240, env=env)


def timing(samples):
    ordered = sorted(samples)
    return {"median_ms": ordered[len(ordered) // 2], "min_ms": ordered[0], "max_ms": ordered[-1],
            "samples_ms": samples, "count": len(samples)}


def gpu_row(backend, variant, seq, head_dim, fwd_samples, bwd_samples, by_tag, peak, with_flop=True):
    """A row as flashbench (or, with with_flop False, a peer) writes it on a GPU: bf16, H = 8, B = 2."""
    problem = {"batch": 2, "heads": 8, "seq": seq, "head_dim": head_dim, "layers": 1, "causal": False,
               "dtype": "bf16"}
    flop_fwd = 4.0 * 2 * 8 * seq * seq * head_dim  # any count will do: the test reads it back from the row
    fwd, bwd = timing(fwd_samples), timing(bwd_samples)
    row = {"backend": backend, "variant": variant, "problem": problem, "status": "ok", "reason": "",
           "timing": {"fwd": fwd, "bwd": bwd},
           "throughput": {"fwd_tflops": flop_fwd / (fwd["median_ms"] * 1e9),
                          "bwd_tflops": 2.5 * flop_fwd / (bwd["median_ms"] * 1e9)},
           "memory": {"measured": {"peak_bytes": peak, "by_tag": by_tag}}, "device": GPU}
    if with_flop:
        row["impl"] = variant
        row["flop"] = {"fwd": flop_fwd, "bwd": 2.5 * flop_fwd}
        row["threads"] = 0
    return row


def gpu_files(folder):
    """A flashbench CUDA file (standard, v2 at N = 1024, 2048; d = 64) and a peer file (torch flash at
    the same N, d = 64, and one N at d = 128 that no `standard` ran)."""
    mib = 1 << 20
    flashbench = {"schema_version": 1, "meta": {"tool": "flashbench", "gpu": {"name": GPU}}, "rows": []}
    peers = [{"schema_version": 1, "meta": {"tool": "torch_sdpa.py", "gpu": {"name": GPU}}}]
    for seq, scale in ((1024, 1.0), (2048, 4.0)):
        flashbench["rows"].append(gpu_row("cuda", "standard", seq, 64, [2.0 * scale, 2.2 * scale, 1.9 * scale],
                                          [3.0 * scale, 3.3 * scale, 2.9 * scale],
                                          {"input": 8 * mib, "activation": 0, "kept": 64 * mib * scale,
                                           "workspace": 70 * mib * scale, "grad": 4 * mib},
                                          int((12 + 134 * scale) * mib)))
        flashbench["rows"].append(gpu_row("cuda", "v2", seq, 64, [0.5 * scale, 0.45 * scale, 0.6 * scale],
                                          [1.0 * scale, 1.1 * scale, 0.95 * scale],
                                          {"input": 8 * mib, "activation": 0, "kept": mib, "workspace": 9 * mib,
                                           "grad": 4 * mib}, 22 * mib))
        peers.append(gpu_row("torch-sdpa-flash", "v2", seq, 64, [0.3 * scale, 0.31 * scale, 0.29 * scale],
                             [0.8 * scale, 0.82 * scale, 0.79 * scale],
                             {"input": 24 * mib, "activation": None, "kept": mib, "workspace": None, "grad": None},
                             int(61.5 * mib * scale), with_flop=False))
    # v2's backward at N = 2048 had two samples under a held-down clock (the timing protocol's count).
    flashbench["rows"][3]["timing"]["bwd"]["throttled_samples"] = 2
    peers.append(gpu_row("torch-sdpa-flash", "v2", 1024, 128, [0.6, 0.62], [1.6, 1.7],
                         {"input": 48 * mib, "activation": None, "kept": mib, "workspace": None, "grad": None},
                         130 * mib, with_flop=False))
    flashbench_path, peer_path = os.path.join(folder, "cuda.json"), os.path.join(folder, "peers.jsonl")
    with open(flashbench_path, "w", encoding="utf-8") as handle:
        json.dump(flashbench, handle)
    with open(peer_path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(json.dumps(line) for line in peers) + "\n")
    return flashbench["rows"], peers[1:], flashbench_path, peer_path


def cpu_file_with_peak(folder):
    """tests/data/cpu-small.json with every row read against a sgemm ceiling of PEAK_GFLOPS."""
    with open(CPU, encoding="utf-8") as handle:
        document = json.load(handle)
    for row in document["rows"]:
        row.setdefault("throughput", {})["peak_gflops"] = PEAK_GFLOPS
    path = os.path.join(folder, "cpu-peak.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    return document["rows"], document["meta"], path


def panel(figure, title):
    return next(p for p in figure["panels"] if p["title"] == title)


def line(panel_, label):
    return next(entry for entry in panel_["lines"] if entry["label"] == label)


def units_of(label):
    """Bytes in the unit an axis label names ("live at the peak [MiB]" -> 2**20)."""
    name = label[label.rindex("[") + 1:label.rindex("]")]
    return {"B": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}[name]


class PlotTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        folder = cls.folder.name
        cls.gpu_rows, cls.peer_rows, gpu_path, peer_path = gpu_files(folder)
        cls.gpu_out = os.path.join(folder, "gpu")
        cls.gpu_run = plot(gpu_path, peer_path, "--out", cls.gpu_out, "--describe", os.path.join(folder, "gpu.json"))
        with open(os.path.join(folder, "gpu.json"), encoding="utf-8") as handle:
            cls.gpu = {figure["name"]: figure for figure in json.load(handle)["figures"]}
        cls.cpu_rows, cls.cpu_meta, cpu_path = cpu_file_with_peak(folder)
        cls.cpu_out = os.path.join(folder, "cpu")
        cls.cpu_run = plot(cpu_path, "--out", cls.cpu_out, "--svg", "--describe", os.path.join(folder, "cpu.json"))
        with open(os.path.join(folder, "cpu.json"), encoding="utf-8") as handle:
            cls.cpu = {figure["name"]: figure for figure in json.load(handle)["figures"]}

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def test_rows_the_summary_calls_disturbed_are_ringed(self):
        # A copy of the CPU file whose summary names its first standard row as disturbed: that
        # point, and the speed-ups built on it, get the ring and its legend entry.
        with open(CPU, encoding="utf-8") as handle:
            document = json.load(handle)
        index = next(i for i, row in enumerate(document["rows"])
                     if row.get("status") == "ok" and row.get("impl", row.get("variant")) == "standard")
        document["summary"] = dict(document.get("summary") or {}, disturbed=[{"row": index}])
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "disturbed.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(document, handle)
            done = plot(path, "--out", folder, "--describe", os.path.join(folder, "figures.json"))
            self.assertEqual(done.returncode, 0, done.stderr)
            with open(os.path.join(folder, "figures.json"), encoding="utf-8") as handle:
                figures = {figure["name"]: figure for figure in json.load(handle)["figures"]}
        note = "ring: disturbed? far off its series' scaling (run it again)"
        self.assertIn(note, figures["time_vs_seq"]["legend"])
        self.assertIn(note, figures["speedup_vs_seq"]["legend"])
        self.assertNotIn(note, self.cpu["time_vs_seq"]["legend"])  # none named, none drawn

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

    def test_titles_say_how_the_batch_went(self):
        sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
        import plot as plot_module  # pylint: disable=import-outside-toplevel
        row = {"backend": "cuda", "device": GPU, "threads": 0, "problem": {"heads": 16, "head_dim": 128, "dtype": "bf16"}}

        def title(batch_and_seq):
            contexts = [plot_module.context_of(dict(row, problem=dict(row["problem"], batch=b, seq=n)), {})
                        for b, n in batch_and_seq]
            return plot_module.context_title(contexts)
        self.assertEqual(title([(4, 1024), (1, 4096)]), f"{GPU} · bf16 · d = 128 · H = 16 · B·N = 4096 · no mask")
        self.assertIn("· B = max(1, 4096/N) ·", title([(4, 1024), (1, 4096), (1, 8192)]))
        self.assertIn("· B = 1, 4 ·", title([(4, 1024), (1, 2048)]))
        self.assertIn("· B = 2 ·", title([(2, 1024), (2, 2048)]))

    def test_writes_every_figure_as_png_and_svg(self):
        self.assertEqual(self.gpu_run.returncode, 0, self.gpu_run.stderr)
        self.assertEqual(self.cpu_run.returncode, 0, self.cpu_run.stderr)
        for name in FIGURES:
            for out, described in ((self.gpu_out, self.gpu), (self.cpu_out, self.cpu)):
                png = os.path.join(out, name + ".png")
                with open(png, "rb") as handle:
                    self.assertEqual(handle.read(8), b"\x89PNG\r\n\x1a\n", png)
                self.assertGreater(os.path.getsize(png), 10_000, png)
            with open(os.path.join(self.cpu_out, name + ".svg"), encoding="utf-8") as handle:
                self.assertIn("<svg", handle.read(2000))
            self.assertEqual(self.gpu[name]["files"], [f"{name}.png"])
            self.assertEqual(self.cpu[name]["files"], [f"{name}.png", f"{name}.svg"])
        self.assertEqual(sorted(self.cpu_run.stdout.split()),
                         sorted(os.path.join(self.cpu_out, f"{n}.{e}") for n in FIGURES for e in ("png", "svg")))

    def test_titles_name_what_the_rows_ran_on(self):
        for name, figure in self.gpu.items():
            title = figure["title"]
            for part in (GPU, "bf16", "H = 8", "B = 2", "no mask"):
                self.assertIn(part, title, name)
            self.assertNotIn("threads", title, name)  # a GPU row has no thread count
            # A d = 128 peer row is drawn everywhere but in the speed-up, which has no standard for it.
            self.assertIn("d = 64 ·" if name == "speedup_vs_seq" else "d = 64, 128 ·", title, name)
        threads = {row["threads"] for row in self.cpu_rows}
        self.assertEqual(len(threads), 1)
        for name, figure in self.cpu.items():
            title = figure["title"]
            for part in (self.cpu_meta["host"]["cpu"], f"{next(iter(threads))} threads",
                         "fp32", "d = 32", "H = 2", "B = 1", "no mask"):
                self.assertIn(part, title, name)

    def test_each_implementation_keeps_its_colour(self):
        colours = {}
        for figure in self.gpu.values():
            for panel_ in figure["panels"]:
                for entry in panel_["lines"]:
                    name = entry["label"].split(" (")[0].removeprefix("model: ")
                    colours.setdefault(name, set()).add(entry["colour"])
                for bar in panel_["bars"]:
                    colours.setdefault(bar["label"].split(" (")[0], set()).add(bar["colour"])
        self.assertTrue({"standard", "v2", "torch-sdpa-flash"} <= set(colours), colours)
        for name in ("standard", "v2", "torch-sdpa-flash"):
            self.assertEqual(len(colours[name]), 1, (name, colours[name]))
        self.assertEqual(len({next(iter(colours[n])) for n in ("standard", "v2", "torch-sdpa-flash")}), 3)

    def test_bands_span_the_samples(self):
        figure = self.gpu["time_vs_seq"]
        self.assertIn("band: min-max of the samples", figure["legend"])
        for phase, title in (("fwd", "forward time"), ("bwd", "backward time")):
            bands = {band["series"]: band for band in panel(figure, title)["bands"]}
            for row in self.gpu_rows:
                band = bands[f"{row['impl']} (cuda)"]
                at = band["x"].index(row["problem"]["seq"])
                self.assertAlmostEqual(band["low"][at], min(row["timing"][phase]["samples_ms"]), places=9)
                self.assertAlmostEqual(band["high"][at], max(row["timing"][phase]["samples_ms"]), places=9)
        self.assertIn("band: min-max of the samples", self.gpu["throughput_vs_seq"]["legend"])

    def test_throttled_points_are_marked(self):
        figure = self.gpu["time_vs_seq"]
        note = "x: some samples ran with the GPU throttled"
        self.assertIn(note, figure["legend"])
        marks = line(panel(figure, "backward time"), note)
        v2 = self.gpu_rows[3]
        self.assertEqual((v2["impl"], v2["problem"]["seq"]), ("v2", 2048))
        self.assertEqual(marks["x"], [2048.0])
        self.assertAlmostEqual(marks["y"][0], v2["timing"]["bwd"]["median_ms"], places=9)
        self.assertFalse(any(entry["label"] == note for entry in panel(figure, "forward time")["lines"]))

    def test_rates_are_the_rows_flop_over_their_times(self):
        figure = self.gpu["throughput_vs_seq"]
        both = panel(figure, "forward + backward")
        self.assertIn("TFLOP/s", both["ylabel"])
        v2 = sorted((r for r in self.gpu_rows if r["impl"] == "v2"), key=lambda r: r["problem"]["seq"])
        expected = [(r["flop"]["fwd"] + r["flop"]["bwd"])
                    / ((r["timing"]["fwd"]["median_ms"] + r["timing"]["bwd"]["median_ms"]) * 1e-3) / 1e12 for r in v2]
        for got, want in zip(line(both, "v2 (cuda)")["y"], expected, strict=True):
            self.assertAlmostEqual(got, want, delta=want * 1e-9)
        # A peer carries only its rate: its forward line is that rate.
        peer = sorted((r for r in self.peer_rows if r["problem"]["head_dim"] == 64), key=lambda r: r["problem"]["seq"])
        fwd = line(panel(figure, "forward"), "torch-sdpa-flash (B=2 H=8 d=64 L=1 bf16)")
        for got, row in zip(fwd["y"], peer, strict=True):
            self.assertAlmostEqual(got, row["throughput"]["fwd_tflops"], delta=got * 1e-9)
        # On the CPU: GFLOP/s, with % of the sgemm ceiling the rows carry.
        cpu_panel = panel(self.cpu["throughput_vs_seq"], "backward")
        self.assertIn("GFLOP/s", cpu_panel["ylabel"])
        self.assertIn(f"% of peak ({PEAK_GFLOPS:.0f} GFLOP/s", cpu_panel["ylabel_right"])
        row = next(r for r in self.cpu_rows if r["variant"] == "v2" and r["status"] == "ok")
        v2_line = line(cpu_panel, "v2 (cpu)")
        at = v2_line["x"].index(row["problem"]["seq"])
        self.assertAlmostEqual(v2_line["y"][at], 1000 * row["throughput"]["bwd_tflops"], delta=v2_line["y"][at] * 1e-6)

    def test_speed_up_is_against_standard(self):
        figure = self.gpu["speedup_vs_seq"]
        by_seq = {}
        for row in self.gpu_rows:
            by_seq.setdefault(row["problem"]["seq"], {})[row["impl"]] = row
        for phase, title in (("fwd", "forward"), ("bwd", "backward"), ("total", "forward + backward")):
            drawn = panel(figure, title)
            standard = line(drawn, "standard (cuda)")
            self.assertEqual(standard["y"], [1.0] * len(by_seq))
            v2 = line(drawn, "v2 (cuda)")

            def median(row, phase=phase):
                phases = ("fwd", "bwd") if phase == "total" else (phase,)
                return sum(row["timing"][p]["median_ms"] for p in phases)
            expected = [median(by_seq[n]["standard"]) / median(by_seq[n]["v2"]) for n in sorted(by_seq)]
            self.assertEqual(v2["x"], sorted(by_seq))
            for got, want in zip(v2["y"], expected, strict=True):
                self.assertAlmostEqual(got, want, delta=want * 1e-9)

    def test_a_peer_bar_stands_at_its_measured_peak(self):
        figure = self.gpu["memory_by_tag"]
        # The legend names the segments some bar has bytes of (these rows keep no activation).
        shown = {name for panel_ in figure["panels"] for bar in panel_["bars"]
                 for name, height in bar["segments"].items() if height > 0}
        self.assertEqual(figure["legend"], [s for s in ("input", "activation", "kept", "workspace", "grad",
                                                        "unattributed") if s in shown])
        self.assertIn("unattributed", figure["legend"])  # the peers' rows state only some tags
        unit = units_of(panel(figure, f"N = {self.gpu_rows[0]['problem']['seq']}")["ylabel"])
        for row in self.peer_rows + self.gpu_rows:
            n, d = row["problem"]["seq"], row["problem"]["head_dim"]
            name = row.get("impl") or row["backend"]
            bar = next(b for b in panel(figure, f"N = {n}")["bars"]
                       if b["label"].startswith(name) and (f"d={d} " in b["label"] or name != "torch-sdpa-flash"))
            peak = row["memory"]["measured"]["peak_bytes"]
            self.assertAlmostEqual(bar["top"], peak / unit, delta=1e-9)
            known = sum(v for v in row["memory"]["measured"]["by_tag"].values() if v is not None)
            self.assertAlmostEqual(bar["segments"]["unattributed"], (peak - known) / unit, delta=1e-9)
            if "impl" in row:
                self.assertEqual(bar["segments"]["unattributed"], 0.0)  # flashbench's tags add up to the peak
            else:
                self.assertGreater(bar["segments"]["unattributed"], 0.0)
        # Each axis reads in the largest binary unit in which its largest value is at least 1.
        for figure in (self.gpu, self.cpu):
            tops = [bar["top"] for panel_ in figure["memory_by_tag"]["panels"] for bar in panel_["bars"]]
            for panel_ in figure["memory_by_tag"]["panels"]:
                self.assertTrue(panel_["ylabel"].startswith("live at the peak ["), panel_["ylabel"])
                self.assertGreater(panel_["ylim"][1], max(bar["top"] for bar in panel_["bars"]))  # no bar cut off
            self.assertTrue(1 <= max(tops) < 1024, f"the largest bar reads {max(tops)} in its unit")
        memory = panel(self.gpu["memory_vs_seq"], "measured (markers), model (lines)")
        self.assertTrue(memory["ylabel"].startswith("peak memory ["), memory["ylabel"])

    def test_series_follow_the_rows(self):
        result = plot(CPU, PEER, "--dump-series")
        self.assertEqual(result.returncode, 0, result.stderr)
        dumped = json.loads(result.stdout)
        self.assertEqual(dumped["sources"], ["cpu", "torch-sdpa-math", "torch-sdpa-flash"])
        series = {(s["source"], s["name"]): s for s in dumped["series"]}
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
        flash = series[("torch-sdpa-flash", "torch-sdpa-flash")]
        self.assertEqual([p["seq"] for p in flash["points"]], [512, 1024, 2048, 4096])
        self.assertTrue(flash["shape"].startswith("B*N=16384 "), flash["shape"])
        only = json.loads(plot(CPU, "--dump-series", "--where", "seq=128").stdout)
        self.assertEqual({p["seq"] for s in only["series"] for p in s["points"]}, {128})

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
            for where in ("causal", "colour=red"):
                result = plot(CPU, "--dump-series", "--where", where)
                self.assertEqual(result.returncode, 2, where)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)

    def test_without_matplotlib_one_line_names_the_package(self):
        with tempfile.TemporaryDirectory() as folder:
            # A matplotlib that cannot be imported, as on a Python without the package.
            with open(os.path.join(folder, "matplotlib.py"), "w", encoding="utf-8") as handle:
                handle.write("raise ImportError(\"No module named 'matplotlib'\")\n")
            env = dict(os.environ, PYTHONPATH=folder, PYTHONDONTWRITEBYTECODE="1")
            result = plot(CPU, "--out", os.path.join(folder, "figures"), env=env)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
            self.assertIn("apt-get install python3-matplotlib", result.stderr)
            self.assertNotIn("Traceback", result.stderr)
            self.assertEqual(os.listdir(folder), ["matplotlib.py"])  # nothing written
            self.assertEqual(plot(CPU, "--dump-series", env=env).returncode, 0)  # reading needs no matplotlib


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
