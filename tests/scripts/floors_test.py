#!/usr/bin/env python3
"""scripts/peers/floors.py without a GPU or torch: the plans count the products and passes each
variant's algorithm needs, a floor is composed from measured parts and the layers, rows that are not
plain self-attention are skipped with their reason, the table shows the ratios, and bad input is one
line on stderr with exit 2 (before torch is needed).

usage: tests/scripts/floors_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import contextlib
import importlib.util
import io
import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(sys.argv[2]) / "scripts" / "peers"))
import floors  # noqa: E402


def row(variant="standard", fwd=3.0, bwd=5.0, **problem):
    p = {"batch": 1, "heads": 2, "kv_heads": 2, "seq": 64, "seq_k": 64, "head_dim": 8, "layers": 1,
         "causal": False, "dropout": 0.0, "dtype": "bf16"}
    p.update(problem)
    return {"backend": "cuda", "variant": variant, "impl": variant, "status": "ok", "problem": p,
            "timing": {"fwd": {"median_ms": fwd}, "bwd": {"median_ms": bwd}}, "source": "test.json"}


# Made-up parts: products 1..6 ms in PRODUCTS' order, a pass 0.5 ms.
PARTS = {"products": {name: float(i + 1) for i, name in enumerate(floors.PRODUCTS)}, "pass_ms": 0.5,
         "copy_gbps": 4000.0}


class Plans(unittest.TestCase):
    def test_counts(self):
        forward = (["S = Q·Kᵀ", "O = P·V"], 1, 1)  # S read once, P written once; the same for all three
        backward = ["dP = dO·Vᵀ", "dV = Pᵀ·dO", "dQ = dS·K", "dK = dSᵀ·Q"]
        self.assertEqual(floors.PLANS, {
            "standard": {"fwd": forward, "bwd": (backward, 2, 1)},  # P and dP read, dS written
            "v1": {"fwd": forward, "bwd": (backward, 3, 2)},  # P from the kept S first
            "checkpoint": {"fwd": forward, "bwd": (["S = Q·Kᵀ"] + backward, 3, 2)},  # S again, then P from it
        })
        for plan in floors.PLANS.values():
            for products, _, _ in plan.values():
                self.assertTrue(set(products) <= set(floors.PRODUCTS))

    def test_copy_is_two_passes(self):
        # 8 GB copied in 4 ms: one pass 2 ms, 4000 GB/s (read + write).
        self.assertEqual(floors.copy_pass(4.0, 8e9), {"pass_ms": 2.0, "copy_gbps": 4000.0})

    def test_saved_parts_are_checked(self):
        self.assertIsNone(floors.check_parts({"a": PARTS, "b": {"error": "oom"}}))
        no_product = {"products": {name: 1.0 for name in floors.PRODUCTS[1:]}, "pass_ms": 1.0, "copy_gbps": 1.0}
        for bad in ([PARTS], {"a": no_product}, {"a": dict(PARTS, pass_ms=0.0)}, {"a": dict(PARTS, copy_gbps="x")},
                    {"a": "text"}):
            self.assertIsNotNone(floors.check_parts(bad), bad)

    def test_causal_reads_the_visible_part(self):
        self.assertEqual(floors.passes("standard", "bwd", {"seq": 64}), 3)
        self.assertAlmostEqual(floors.passes("standard", "bwd", {"seq": 64, "causal": True}), 2 * 65 / 128 + 1)
        self.assertAlmostEqual(floors.passes("standard", "fwd", {"seq": 1, "causal": True}), 2)  # one row: all visible

    def test_floor_composition(self):
        p = row()["problem"]
        # standard fwd: S (1) + O (2) + 2 passes x 0.5 = 4 ms; bwd: 3 + 4 + 5 + 6 + 3 x 0.5 = 19.5 ms.
        self.assertAlmostEqual(floors.floor_of("standard", "fwd", PARTS, p), 4.0)
        self.assertAlmostEqual(floors.floor_of("standard", "bwd", PARTS, p), 19.5)
        self.assertAlmostEqual(floors.floor_of("v1", "bwd", PARTS, p), 20.5)
        self.assertAlmostEqual(floors.floor_of("checkpoint", "bwd", PARTS, dict(p, layers=3)), 3 * (19.5 + 1 + 1))
        self.assertIsNone(floors.floor_of("standard", "fwd", None, p))
        self.assertIsNone(floors.floor_of("standard", "fwd", {"error": "oom"}, p))


class Rows(unittest.TestCase):
    def test_judged_ratio(self):
        judged = floors.judge(row(fwd=6.0, bwd=39.0, layers=2), PARTS)
        self.assertEqual(judged["status"], "ok")
        self.assertAlmostEqual(judged["fwd"]["floor_ms"], 8.0)
        self.assertAlmostEqual(judged["fwd"]["ratio"], 0.75)
        self.assertAlmostEqual(judged["bwd"]["ratio"], 1.0)

    def test_skipped_with_reasons(self):
        cases = {"dropout": row(dropout=0.1), "grouped K/V": row(kv_heads=1), "N_k != N": row(seq_k=32),
                 "status oom": dict(row(), status="oom")}
        for reason, r in cases.items():
            judged = floors.judge(r, PARTS)
            self.assertEqual(judged["status"], "skipped", reason)
            self.assertIn(reason, judged["reason"])
        self.assertEqual(floors.judge(row(), {"error": "oom"})["reason"], "oom")
        self.assertIsNotNone(floors.why_not(row(variant="v2")))

    def test_markdown(self):
        judged = [floors.judge(row(fwd=6.0, bwd=39.0, layers=2), PARTS), floors.judge(row(dropout=0.1), PARTS)]
        text = floors.markdown(judged, {"1,2,64,8,bf16": PARTS, "1,2,99,8,bf16": {"error": "oom"}},
                               {"gpu": "a GPU", "torch": "x", "time": "now"})
        self.assertIn("| standard | 1,2,64,8 | 0 | bf16 | 6.000 | 8.000 | 0.75 | 39.000 | 39.000 | 1.00 |", text)
        self.assertIn("skipped: dropout", text)
        self.assertIn("| 1,2,99,8,bf16 | oom |", text)
        # every table line has as many cells as its header
        for table in text.split("\n\n"):
            lines = [line for line in table.splitlines() if line.startswith("|")]
            if lines:
                self.assertEqual({line.count("|") for line in lines}, {lines[0].count("|")}, table)


class SavedParts(unittest.TestCase):
    def test_rows_judged_against_saved_parts(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            saved = {"meta": {"gpu": "a GPU", "torch": "x"}, "parts": {"1,2,64,8,bf16": PARTS}, "rows": []}
            (tmp / "old.json").write_text(json.dumps(saved))
            results = tmp / "r.json"
            results.write_text(json.dumps({"rows": [row(fwd=6.0, bwd=39.0, layers=2), row(variant="v2"),
                                                    row(seq=128, seq_k=128)]}))
            with contextlib.redirect_stdout(io.StringIO()):
                code = floors.main([str(tmp / "out"), str(results), "--parts", str(tmp / "old.json")])
            self.assertEqual(code, 0)
            written = json.loads((tmp / "out" / "floors.json").read_text())
            by_seq = {r["problem"]["seq"]: r for r in written["rows"]}
            self.assertEqual(len(written["rows"]), 2)  # v2 is no row of this table
            self.assertAlmostEqual(by_seq[64]["bwd"]["ratio"], 1.0)
            self.assertEqual(by_seq[128]["reason"], "parts not measured")
            self.assertIn("Parts from", (tmp / "out" / "floors.md").read_text())
            self.assertFalse(list((tmp / "out").glob("*.partial")))


class BadInput(unittest.TestCase):
    def run_main(self, *argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = floors.main(list(argv))
        return code, err.getvalue()

    def test_missing_and_malformed_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "bad.json").write_text("{not json")
            results = tmp / "r.json"
            results.write_text(json.dumps({"rows": [row()]}))
            meta = {"gpu": "a GPU", "torch": "x"}
            saved = {"no gpu": {"meta": {"torch": "x"}, "parts": {"1,2,64,8,bf16": PARTS}},
                     "parts a list": {"meta": meta, "parts": [PARTS]},
                     "a product missing": {"meta": meta, "parts": {"1,2,64,8,bf16": {"pass_ms": 1.0, "copy_gbps": 1.0,
                                                                                     "products": {}}}}}
            (tmp / "saved").mkdir()
            for what, document in saved.items():
                (tmp / "saved" / "parts.json").write_text(json.dumps(document))
                code, err = self.run_main(str(tmp / "out"), str(results), "--parts", str(tmp / "saved" / "parts.json"))
                self.assertEqual((code, len(err.strip().splitlines())), (2, 1), f"{what}: {err}")
            code, err = self.run_main(str(tmp / "out"), str(results), "--parts", str(tmp / "bad.json"))
            self.assertEqual((code, len(err.strip().splitlines())), (2, 1), err)
            if importlib.util.find_spec("torch") is None:  # measuring without torch: said, not a traceback
                code, err = self.run_main(str(tmp / "out"), str(results))
                self.assertEqual((code, len(err.strip().splitlines())), (2, 1), err)
                self.assertIn("PyTorch", err)
            for path in (tmp / "missing.json", tmp / "bad.json"):
                code, err = self.run_main(str(tmp / "out"), str(path))
                self.assertEqual(code, 2)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(str(path), err)
            self.assertFalse((tmp / "out").exists())

    def test_output_folder_that_cannot_be_made(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "saved.json").write_text(json.dumps({"meta": {"gpu": "g", "torch": "t"}, "parts": {}}))
            (tmp / "r.json").write_text(json.dumps({"rows": [row()]}))
            (tmp / "file").write_text("")
            code, err = self.run_main(str(tmp / "file" / "out"), str(tmp / "r.json"), "--parts", str(tmp / "saved.json"))
            self.assertEqual((code, len(err.strip().splitlines())), (2, 1), err)
            self.assertIn("cannot create", err)

    def test_no_eligible_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            results = tmp / "r.json"
            results.write_text(json.dumps({"rows": [row(variant="v2"), row(dropout=0.1)]}))
            code, err = self.run_main(str(tmp / "out"), str(results))
            self.assertEqual(code, 2)
            self.assertIn("no ok cuda row", err)
            self.assertFalse((tmp / "out").exists())


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
