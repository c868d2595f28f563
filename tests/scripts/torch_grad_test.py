#!/usr/bin/env python3
"""scripts/peers/torch_grad.py without a GPU or torch: its shape list parses BxHxNxd and
BxHxGxNxN_kxd and refuses malformed shapes (G not dividing H among them), it finds the build's cuda
implementations (cudnn among them, as variant v2) through `flashbench info`, a refused `flashbench
grad --backend cuda` is exit 2 with the binary's reason, it reads the o, dq, dk, dv files `flashbench
grad` writes (the CPU backend's, here) and names an older binary's dx.npy, each tensor is judged
against its own bar, and the markdown has one line per row with its four errors or its reason.

usage: tests/scripts/torch_grad_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import argparse
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

BINARY = sys.argv[1]
sys.path.insert(0, str(Path(sys.argv[2]) / "scripts" / "peers"))
import torch_grad  # noqa: E402


def write_inputs(folder, b=1, h=2, g=1, n=4, n_k=6, d=8, seed=1):
    """Q, dO [b,h,n,d] and K, V [b,g,n_k,d] float32 .npy files: {"q": path, ...}."""
    rng = np.random.default_rng(seed)
    shapes = {"q": (b, h, n, d), "k": (b, g, n_k, d), "v": (b, g, n_k, d), "do": (b, h, n, d)}
    paths = {}
    for name, shape in shapes.items():
        paths[name] = folder / f"{name}.npy"
        np.save(paths[name], rng.standard_normal(shape).astype(np.float32))
    return paths


class TorchGradScript(unittest.TestCase):
    def test_shapes(self):
        self.assertEqual(torch_grad.parse_shapes("1x2x97x64,2X4x1x128"), [(1, 2, 2, 97, 97, 64), (2, 4, 4, 1, 1, 128)])
        self.assertEqual(torch_grad.parse_shapes("1x4x2x128x192x64"), [(1, 4, 2, 128, 192, 64)])
        for bad in ("1x2x3", "1x2x0x64", "1x2xNx64", "1x4x3x8x8x8", "1x4x2x8x8"):
            with self.assertRaises((argparse.ArgumentTypeError, ValueError), msg=bad):
                torch_grad.parse_shapes(bad)
        for text in ("1x2x97x64", "1x4x2x128x192x64", "1x4x4x8x16x8"):
            self.assertEqual(torch_grad.shape_text(torch_grad.parse_shapes(text)[0]), text)

    def test_implementations_from_info(self):
        known = dict(torch_grad.cuda_implementations(BINARY))
        self.assertEqual(known.get("cudnn"), "v2")
        for variant in ("standard", "v1", "v2", "checkpoint"):
            self.assertEqual(known.get(variant), variant)

    def test_refusal_is_exit_2_with_a_reason(self):
        # Without a GPU (or without CUDA in the build) the cuda backend cannot open: a usage error.
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            done = torch_grad.run_flashbench(BINARY, "cudnn", "bf16", True, write_inputs(tmp), tmp / "out")
            if done.returncode == 0:
                self.skipTest("a GPU with cuDNN is present: the refusal is not reachable here")
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertTrue(done.stderr.strip())
            arrays, why = torch_grad.read_outputs(tmp / "out")
            self.assertIsNone(arrays)
            self.assertIn("o.npy, dq.npy, dk.npy, dv.npy", why)

    def test_reads_what_flashbench_grad_writes(self):
        # The CPU backend writes the same files as the cuda one: the names and shapes the script reads.
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            paths = write_inputs(tmp, b=1, h=2, g=1, n=4, n_k=6, d=8)
            command = [BINARY, "grad", "--backend", "cpu", "--causal", "--out", str(tmp / "out")]
            for name, path in paths.items():
                command += [f"--{name}", str(path)]
            done = subprocess.run(command, capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            arrays, why = torch_grad.read_outputs(tmp / "out")
            self.assertIsNone(why)
            self.assertEqual({name: a.shape for name, a in arrays.items()},
                             {"o": (1, 2, 4, 8), "dq": (1, 2, 4, 8), "dk": (1, 1, 6, 8), "dv": (1, 1, 6, 8)})

    def test_an_older_binarys_dx_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            for name in ("o", "dx"):
                np.save(tmp / f"{name}.npy", np.zeros((1, 1, 2, 2), dtype=np.float32))
            arrays, why = torch_grad.read_outputs(tmp)
            self.assertIsNone(arrays)
            self.assertIn("no dq.npy, dk.npy, dv.npy", why)
            self.assertIn("dx.npy = dQ + dK + dV", why)

    def test_each_tensor_judged_against_its_own_bar(self):
        bar = {"o": {"rel": 1e-3}, "dq": {"rel": 2e-3}, "dk": {"rel": 4e-3}, "dv": {"rel": 1e-3}}
        within = {"o": {"rel": 2e-3}, "dq": {"rel": 5e-3}, "dk": {"rel": 1e-2}, "dv": {"rel": 3e-3}}
        tol, status = torch_grad.judge(within, bar, "bf16")
        self.assertEqual(status, "ok")
        self.assertAlmostEqual(tol["dk"], 3 * 4e-3 + 1e-6)
        beyond = dict(within, dv={"rel": 4e-3})  # under dk's tolerance, over dv's own
        self.assertEqual(torch_grad.judge(beyond, bar, "bf16")[1], "beyond_bar")
        tiny = {name: {"rel": 1e-8} for name in bar}
        self.assertEqual(torch_grad.judge({n: {"rel": 9e-6} for n in bar}, tiny, "fp32")[1], "ok")  # the fp32 floor
        self.assertEqual(torch_grad.judge({n: {"rel": 9e-6} for n in bar}, tiny, "bf16")[1], "beyond_bar")

    def test_markdown(self):
        bar = {name: {"rel": r, "max_abs": 2 * r} for name, r in (("o", 1e-3), ("dq", 2e-3), ("dk", 3e-3), ("dv", 4e-3))}
        got = {name: {"rel": r, "max_abs": 2 * r} for name, r in (("o", 1.5e-3), ("dq", 2.5e-3), ("dk", 3.5e-3),
                                                                 ("dv", 4.5e-3))}
        rows = [
            {"impl": "v2", "variant": "v2", "dtype": "bf16", "shape": [1, 4, 2, 97, 128, 64], "causal": True,
             "naive": bar, "flashbench": got, "status": "ok"},
            {"impl": "cudnn", "variant": "v2", "dtype": "fp32", "shape": [1, 2, 2, 97, 97, 64], "causal": False,
             "naive": bar, "status": "skipped", "reason": "cuDNN's fused attention takes bf16 or fp16, not fp32"},
        ]
        text = torch_grad.markdown(rows, {"gpu": "GPU", "torch": "2.x", "time": "now"})
        lines = [line for line in text.splitlines() if line.startswith("| v2") or line.startswith("| cudnn")]
        self.assertEqual(len(lines), 2)
        self.assertIn("| 1,4,2,97,128,64 | 1 | 1.50e-03 | 2.50e-03 | 3.50e-03 | 4.50e-03 | 1.00e-03 | 2.00e-03 | "
                      "3.00e-03 | 4.00e-03 | ok |", lines[0])
        self.assertIn("skipped: cuDNN's fused attention takes bf16 or fp16, not fp32", lines[1])
        header = next(line for line in text.splitlines() if line.startswith("| impl"))
        self.assertEqual(header.count("|"), lines[0].count("|"))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
