#!/usr/bin/env python3
"""scripts/peers/torch_grad.py without a GPU or torch: its shape list parses and refuses malformed
shapes, it finds the build's cuda implementations (cudnn among them, as variant v2) through
`flashbench info`, a refused `flashbench grad --backend cuda` is a skipped row with the binary's
reason, and the markdown has one line per row with its numbers or its reason.

usage: torch_grad_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import argparse
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

BINARY = sys.argv[1]
sys.path.insert(0, str(Path(sys.argv[2]) / "scripts" / "peers"))
import torch_grad  # noqa: E402


class TorchGradScript(unittest.TestCase):
    def test_shapes(self):
        self.assertEqual(torch_grad.parse_shapes("1x2x97x64,2X4x1x128"), [(1, 2, 97, 64), (2, 4, 1, 128)])
        for bad in ("1x2x3", "1x2x0x64", "1x2xNx64"):
            with self.assertRaises((argparse.ArgumentTypeError, ValueError), msg=bad):
                torch_grad.parse_shapes(bad)

    def test_implementations_from_info(self):
        known = dict(torch_grad.cuda_implementations(BINARY))
        self.assertEqual(known.get("cudnn"), "v2")
        for variant in ("standard", "v1", "v2", "checkpoint"):
            self.assertEqual(known.get(variant), variant)

    def test_refusal_is_exit_2_with_a_reason(self):
        # Without a GPU (or without CUDA in the build) the cuda backend cannot open: a usage error.
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            x = np.zeros((1, 1, 4, 8), dtype=np.float32)
            np.save(tmp / "x.npy", x)
            np.save(tmp / "do.npy", x)
            done = torch_grad.run_flashbench(BINARY, "cudnn", "bf16", True, tmp / "x.npy", tmp / "do.npy", tmp / "out")
            if done.returncode == 0:
                self.skipTest("a GPU with cuDNN is present: the refusal is not reachable here")
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertTrue(done.stderr.strip())
            self.assertFalse((tmp / "out" / "dx.npy").exists())

    def test_markdown(self):
        bar = {"o": {"rel": 1e-3, "max_abs": 2e-3}, "dx": {"rel": 2e-3, "max_abs": 4e-3}}
        rows = [
            {"impl": "v2", "variant": "v2", "dtype": "bf16", "shape": [1, 2, 97, 64], "causal": True, "naive": bar,
             "flashbench": {"o": {"rel": 1.5e-3, "max_abs": 3e-3}, "dx": {"rel": 2.5e-3, "max_abs": 5e-3}},
             "status": "ok"},
            {"impl": "cudnn", "variant": "v2", "dtype": "fp32", "shape": [1, 2, 97, 64], "causal": False,
             "naive": bar, "status": "skipped", "reason": "cuDNN's fused attention takes bf16 or fp16, not fp32"},
        ]
        text = torch_grad.markdown(rows, {"gpu": "GPU", "torch": "2.x", "time": "now"})
        lines = [line for line in text.splitlines() if line.startswith("| v2") or line.startswith("| cudnn")]
        self.assertEqual(len(lines), 2)
        self.assertIn("1.50e-03", lines[0])
        self.assertIn("2.50e-03", lines[0])
        self.assertIn("| ok |", lines[0])
        self.assertIn("skipped: cuDNN's fused attention takes bf16 or fp16, not fp32", lines[1])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
