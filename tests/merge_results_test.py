"""scripts/merge_results.py on small synthetic files: every flashbench row is kept in order, the
first file's meta is taken, peers' rows are appended and their meta goes to meta.peers, the
schema_version is the inputs' own, inputs whose schema_version differ (or that name none) are
refused with one line on stderr, and the table shows "impl" where a row has one.

Run by CTest as: python3 merge_results_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary is not needed).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MERGE = os.path.join(SOURCE_DIR, "scripts", "merge_results.py")


def row(backend, variant, seq, causal=False, **extra):
    r = {"backend": backend, "variant": variant,
         "problem": {"batch": 4096 // seq, "heads": 2, "seq": seq, "head_dim": 64, "layers": 1, "causal": causal,
                     "dtype": "bf16"},
         "status": "ok", "reason": "", "timing": {"fwd": {"median_ms": 1.5}, "bwd": {"median_ms": 3.25}},
         "throughput": {"fwd_tflops": 10.0, "bwd_tflops": 12.5},
         "memory": {"measured": {"peak_bytes": 2 ** 30}, "model": {"peak_bytes": 2 ** 31}},
         "check": {"max_rel_err": 0.015}}
    r.update(extra)
    return r


class MergeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.out = os.path.join(self.dir, "sweep.json")

    def tearDown(self):
        self.tmp.cleanup()

    def stream(self, name, version, meta, rows):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"schema_version": version, "meta": meta}) + "\n")
            for r in rows:
                handle.write(json.dumps(r) + "\n")
            handle.write(json.dumps({"summary": {"rows": len(rows)}}) + "\n")
        return path

    def document(self, name, document):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(document, handle)
        return path

    def merge(self, *arguments):
        return subprocess.run([sys.executable, MERGE, "--out", self.out, *arguments], capture_output=True,
                              text=True, timeout=60)

    def test_rows_meta_and_peers(self):
        ours_a = [row("cuda", "v2", 1024, impl="v2.split"), row("cuda", "standard", 1024, causal=True)]
        ours_b = [row("cuda", "v2", 2048, impl="v2")]
        meta_a, meta_b = {"tool": "flashbench", "git": "aaa"}, {"tool": "flashbench", "git": "bbb"}
        a = self.stream("cuda-a.jsonl", 1, meta_a, ours_a)
        empty = os.path.join(self.dir, "cuda-crashed.jsonl")
        open(empty, "w").close()
        b = self.stream("cuda-b.jsonl", 1, meta_b, ours_b)
        peer_rows = [row("torch-sdpa-flash", "v2", 1024), row("torch-sdpa-math", "standard", 2048, status="oom")]
        peer = self.document("peers-sdpa.json", {"schema_version": 1, "meta": {"tool": "torch_sdpa.py"},
                                                 "rows": peer_rows})
        result = self.merge(a, empty, b, "--peer", peer)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(self.out, encoding="utf-8") as handle:
            merged = json.load(handle)
        self.assertEqual(merged["schema_version"], 1)
        self.assertEqual(merged["rows"], ours_a + ours_b + peer_rows)
        self.assertEqual(merged["meta"], dict(meta_a, peers=[{"tool": "torch_sdpa.py"}]))

        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], f"5 rows -> {self.out}")
        self.assertIn("impl", lines[1].split())
        body = [line.split() for line in lines[2:]]
        self.assertEqual(len(body), 5)
        # Sorted by causal, N, backend, implementation; impl shown when present, else the variant.
        self.assertEqual([(b[0], b[1], b[2]) for b in body],
                         [("cuda", "v2.split", "1024"), ("torch-sdpa-flash", "v2", "1024"),
                          ("cuda", "v2", "2048"), ("torch-sdpa-math", "standard", "2048"),
                          ("cuda", "standard", "1024")])
        first = body[0]
        self.assertEqual(first[3:], ["4", "0", "1.50", "3.25", "12.5", "1.00", "2.00", "1.5e-02", "ok"])
        self.assertEqual(body[3][-1], "oom")

    def test_peers_alone_and_a_document_input(self):
        ours = self.document("ours.json", {"schema_version": 1, "meta": {"tool": "flashbench"},
                                           "rows": [row("cuda", "v1", 512)]})
        peer = self.stream("peer.jsonl", 1, {"tool": "torch_sdpa.py"}, [row("torch-sdpa-cudnn", "v2", 512)])
        result = self.merge("--peer", peer)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(self.out, encoding="utf-8") as handle:
            merged = json.load(handle)
        self.assertEqual(merged["meta"], {"peers": [{"tool": "torch_sdpa.py"}]})
        self.assertEqual(len(merged["rows"]), 1)
        self.assertEqual(self.merge(ours, "--peer", peer).returncode, 0)

    def test_schema_version_comes_from_the_inputs(self):
        a = self.stream("a.jsonl", 7, {"tool": "flashbench"}, [row("cuda", "v2", 1024)])
        peer = self.document("peer.json", {"schema_version": 7, "meta": {}, "rows": [row("torch-sdpa-flash", "v2", 1024)]})
        result = self.merge(a, "--peer", peer)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(self.out, encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["schema_version"], 7)

    def test_differing_schema_versions_are_refused(self):
        a = self.stream("a.jsonl", 1, {"tool": "flashbench"}, [row("cuda", "v2", 1024)])
        b = self.stream("b.jsonl", 2, {"tool": "flashbench"}, [row("cuda", "v2", 2048)])
        peer = self.document("peer.json", {"schema_version": 2, "meta": {}, "rows": [row("torch-sdpa-flash", "v2", 1024)]})
        unnamed = self.document("unnamed.json", {"meta": {}, "rows": [row("cuda", "v1", 1024)]})
        for inputs, names in (([a, b], ("a.jsonl' has 1", "b.jsonl' has 2")),
                              ([a, "--peer", peer], ("a.jsonl' has 1", "peer.json' has 2")),
                              ([a, unnamed], ("unnamed.json' names no schema_version",))):
            result = self.merge(*inputs)
            self.assertEqual(result.returncode, 2, inputs)
            self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
            self.assertTrue(result.stderr.startswith("merge_results.py: "), result.stderr)
            for name in names:
                self.assertIn(name, result.stderr)
            self.assertFalse(os.path.exists(self.out), inputs)
            self.assertEqual(result.stdout, "")

    def test_nothing_to_merge(self):
        empty = os.path.join(self.dir, "empty.jsonl")
        open(empty, "w").close()
        for inputs in ([], [empty]):
            result = self.merge(*inputs)
            self.assertEqual(result.returncode, 2, inputs)
            self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
            self.assertFalse(os.path.exists(self.out))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
