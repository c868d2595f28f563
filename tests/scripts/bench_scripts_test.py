"""The benchmark scripts leave other scripts' builds alone: scripts/cpu-bench.sh builds in its own
folder (build-bench) and configures only a folder that has no CMake cache yet, so a build/ that
scripts/test.sh configured with the tests on stays so; scripts/gpu-check.sh refuses a folder
configured otherwise instead of changing it. And scripts/gpu-bench.sh merges its rows files and a
peer's file through `flashbench merge` (the fake binary hands `merge` to the real one).
scripts/gpu-ab.sh tests the candidate build first, times nothing when it fails, and otherwise runs the
two builds alternately (the real binary, on the CPU), compares each round's pair, and all rounds
together (each side's runs merged as rounds).

The scripts run from a copy of scripts/ in a temporary folder (so their root is that folder) with a
fake cmake first on PATH: it records its arguments and writes -D options into the CMakeCache.txt of
-B as CMake does, so the test sees what each script asks CMake to do, without building anything.

Run by CTest as: python3 tests/scripts/bench_scripts_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary runs the merge).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = sys.executable

FAKE_CMAKE = r'''#!PYTHON
"""Records its arguments (one JSON line in $FAKE_CMAKE_LOG); a configure call writes its -D options
into <-B>/CMakeCache.txt as KEY:TYPE=VALUE, replacing the entry of the same KEY, as CMake does."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_CMAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
if "--build" in args or "--install" in args:
    sys.exit(0)
build, options, i = None, [], 0
while i < len(args):
    a = args[i]
    if a in ("-B", "-S", "-G", "-D"):
        value = args[i + 1]
        i += 1
    else:
        value = a[2:] if a[:2] in ("-B", "-S", "-G", "-D") else None
    if a.startswith("-B"):
        build = value
    elif a.startswith("-D"):
        key, text = value.split("=", 1)
        options.append((key if ":" in key else key + ":UNINITIALIZED", text))
    elif a.startswith("-G"):
        options.append(("CMAKE_GENERATOR:INTERNAL", value))
    i += 1
os.makedirs(build, exist_ok=True)
cache = os.path.join(build, "CMakeCache.txt")
lines = open(cache).read().splitlines() if os.path.exists(cache) else []
for key, text in options:
    name, kind = key.split(":")
    old = [l for l in lines if l.split("=")[0].split(":")[0] == name]
    if old and kind == "UNINITIALIZED":  # an option given again keeps the type the cache has
        kind = old[0].split("=")[0].split(":")[1]
    lines = [l for l in lines if l not in old] + [f"{name}:{kind}={text}"]
with open(cache, "w") as handle:
    handle.write("\n".join(lines) + "\n")
'''

# What CTest prints at the end; gpu-check greps for it.
FAKE_TOOLS = {"ctest": "#!/bin/sh\necho '100% tests passed, 0 tests failed out of 1'\n",
              "nvcc": "#!/bin/sh\necho 'nvcc: fake'\n",
              "nvidia-smi": "#!/bin/sh\necho 'no GPU here'\n"}

# A fake `flashbench run --format jsonl --out FILE`: one header line and one cuda row of that shape;
# `flashbench merge` is the real one's.
FAKE_FLASHBENCH = r'''#!PYTHON
import json, os, sys
if sys.argv[1] == "merge":
    os.execv(REAL_FLASHBENCH, [REAL_FLASHBENCH] + sys.argv[1:])
args = dict(zip(sys.argv[2::2], sys.argv[3::2]))  # a bare --cold, last, pairs with nothing
cold = "--cold" in sys.argv
seq = int(args["--seq"])
row = {"backend": "cuda", "variant": "v2", "impl": "v2.split",
       "problem": {"batch": int(args["--batch"]), "heads": int(args["--heads"]), "seq": seq,
                   "head_dim": int(args["--head-dim"]), "layers": 1, "causal": args["--mask"] == "true",
                   "dtype": args["--dtype"]},
       "status": "ok", "reason": "", "cold": cold,
       "timing": {"fwd": {"median_ms": 1.0}, "bwd": {"median_ms": 3.0 if cold else 2.5}},
       "throughput": {"fwd_tflops": 100.0, "bwd_tflops": 100.0}}
with open(args["--out"], "w") as out:
    out.write(json.dumps({"schema_version": 1, "meta": {"tool": "flashbench", "argv": sys.argv}}) + "\n")
    out.write(json.dumps(row) + "\n")
'''

CACHE_TESTS_ON = "CMAKE_BUILD_TYPE:STRING=Release\nCMAKE_GENERATOR:INTERNAL=Ninja\nFLASHBENCH_BUILD_TESTS:BOOL=ON\n" \
                 "FLASHBENCH_CUDA:STRING=AUTO\n"


def executable(path, text):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.replace("#!PYTHON", "#!" + PYTHON, 1))
    os.chmod(path, 0o755)


class ScriptBuildsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "checkout")
        shutil.copytree(os.path.join(SOURCE_DIR, "scripts"), os.path.join(self.root, "scripts"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        bin_dir = os.path.join(self.tmp.name, "bin")
        os.makedirs(bin_dir)
        executable(os.path.join(bin_dir, "cmake"), FAKE_CMAKE)
        for name, text in FAKE_TOOLS.items():
            executable(os.path.join(bin_dir, name), text)
        self.log = os.path.join(self.tmp.name, "cmake-calls.jsonl")
        self.env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), FAKE_CMAKE_LOG=self.log)
        for name in ("BUILD_DIR", "SKIP_BUILD", "BUILD_ONLY", "SKIP_CHECK"):
            self.env.pop(name, None)

    def tearDown(self):
        self.tmp.cleanup()

    def run_script(self, name, *args, **env):
        return subprocess.run(["bash", os.path.join(self.root, "scripts", name), *args], capture_output=True,
                              text=True, timeout=120, env=dict(self.env, **env), stdin=subprocess.DEVNULL)

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]

    def configured(self, cache_text):
        build = os.path.join(self.tmp.name, "build")
        os.makedirs(build)
        with open(os.path.join(build, "CMakeCache.txt"), "w", encoding="utf-8") as handle:
            handle.write(cache_text)
        return build

    def cache(self, build):
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as handle:
            return handle.read()

    def assert_no_options(self, calls):
        for call in calls:
            self.assertFalse([a for a in call if a.startswith(("-D", "-G"))], call)

    # scripts/cpu-bench.sh

    def test_cpu_bench_leaves_a_test_build_as_it_is(self):
        build = self.configured(CACHE_TESTS_ON)
        result = self.run_script("cpu-bench.sh", BUILD_DIR=build, BUILD_ONLY="1")
        cache = self.cache(build)
        self.assertIn("FLASHBENCH_BUILD_TESTS:BOOL=ON\n", cache, "cpu-bench turned off the tests of a build it did"
                      " not configure:\n" + cache)
        self.assertEqual(cache, CACHE_TESTS_ON)
        self.assert_no_options(self.calls())
        self.assertIn(["--build", build, "--target", "flashbench"], self.calls())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines()[-1], os.path.join(build, "flashbench"))
        self.assertFalse(os.path.exists(os.path.join(self.root, "results")))  # BUILD_ONLY ran nothing
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(self.root), "flashbench-results")))

    def test_cpu_bench_configures_its_own_folder_once(self):
        result = self.run_script("cpu-bench.sh", BUILD_ONLY="1")
        self.assertEqual(result.returncode, 0, result.stderr)
        own = os.path.join(self.root, "build-bench")
        self.assertEqual(result.stdout.splitlines()[-1], os.path.join(own, "flashbench"))
        configure, build = self.calls()
        self.assertEqual(configure[:4], ["-S", self.root, "-B", own])
        self.assertIn("-DFLASHBENCH_BUILD_TESTS=OFF", configure)
        self.assertIn("-DCMAKE_BUILD_TYPE=Release", configure)
        self.assertEqual(build, ["--build", own, "--target", "flashbench"])
        # The second run finds the cache and passes no options.
        os.remove(self.log)
        result = self.run_script("cpu-bench.sh", BUILD_ONLY="1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(self.calls()), 2)
        self.assert_no_options(self.calls())

    def test_cpu_bench_warns_about_a_debug_build_and_keeps_it(self):
        text = CACHE_TESTS_ON.replace("=Release", "=Debug")
        build = self.configured(text)
        result = self.run_script("cpu-bench.sh", BUILD_DIR=build, BUILD_ONLY="1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("not Release", result.stderr)
        self.assertEqual(self.cache(build), text)

    def test_build_bench_is_ignored_by_git(self):
        if not os.path.isdir(os.path.join(SOURCE_DIR, ".git")) or shutil.which("git") is None:
            self.skipTest("not a git checkout")
        for path in ("build-bench/", "build-bench/flashbench"):
            ignored = subprocess.run(["git", "-C", SOURCE_DIR, "check-ignore", "-q", path], capture_output=True)
            self.assertEqual(ignored.returncode, 0, path)

    # scripts/gpu-check.sh

    def test_gpu_check_refuses_a_build_configured_otherwise(self):
        for text in (CACHE_TESTS_ON, CACHE_TESTS_ON.replace("=AUTO", "=ON").replace("TESTS:BOOL=ON", "TESTS:BOOL=OFF")):
            build = self.configured(text)
            result = self.run_script("gpu-check.sh", os.path.join(self.tmp.name, "check"), build)
            self.assertEqual(result.returncode, 3, result.stderr)
            self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
            self.assertIn("another BUILD_DIR", result.stderr)
            self.assertEqual(self.cache(build), text)
            self.assertEqual(self.calls(), [])
            shutil.rmtree(build)

    def test_gpu_check_builds_a_cuda_build_with_its_own_options(self):
        text = CACHE_TESTS_ON.replace("=AUTO", "=ON")
        build = self.configured(text)
        result = self.run_script("gpu-check.sh", os.path.join(self.tmp.name, "check"), build)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.cache(build), text)
        self.assert_no_options(self.calls())
        self.assertEqual(self.calls()[0][:4], ["-S", self.root, "-B", build])

    def test_gpu_check_configures_a_new_folder(self):
        build = os.path.join(self.tmp.name, "new-build")
        result = self.run_script("gpu-check.sh", os.path.join(self.tmp.name, "check"), build)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("-DFLASHBENCH_CUDA=ON", self.calls()[0])
        self.assertIn("FLASHBENCH_CUDA:UNINITIALIZED=ON", self.cache(build))

    # scripts/gpu-bench.sh

    def fake_gpu_build(self):
        """A build folder whose flashbench is FAKE_FLASHBENCH; plot.py removed (no figures: not what
        the gpu-bench tests check)."""
        build = os.path.join(self.tmp.name, "gpu-build")
        os.makedirs(build)
        executable(os.path.join(build, "flashbench"),
                   FAKE_FLASHBENCH.replace("REAL_FLASHBENCH", repr(os.path.abspath(sys.argv[1])), 2))
        os.remove(os.path.join(self.root, "scripts", "plot.py"))
        return build

    def test_gpu_bench_merges_rows_and_peers(self):
        build = self.fake_gpu_build()
        out = os.path.join(self.tmp.name, "sweep")
        os.makedirs(os.path.join(out, "rows"))
        peer_row = {"backend": "torch-sdpa-flash", "variant": "v2", "status": "ok",
                    "problem": {"batch": 4, "heads": 2, "seq": 128, "head_dim": 64, "layers": 1, "causal": False,
                                "dtype": "bf16"},
                    "timing": {"fwd": {"median_ms": 0.5}, "bwd": {"median_ms": 1.0}},
                    "throughput": {"fwd_tflops": 200.0, "bwd_tflops": 250.0}}
        with open(os.path.join(out, "rows", "peers-torch-sdpa.json"), "w", encoding="utf-8") as handle:
            json.dump({"schema_version": 1, "meta": {"tool": "torch_sdpa.py"}, "rows": [peer_row]}, handle)
        result = self.run_script("gpu-bench.sh", out, BUILD_DIR=build, SKIP_CHECK="1", SKIP_PEERS="1",
                                 SEQS="128 256", TOKENS="512", HEADS="2", HEAD_DIM="64", MASKS="false true")
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        with open(os.path.join(out, "sweep.json"), encoding="utf-8") as handle:
            merged = json.load(handle)
        self.assertEqual(merged["schema_version"], 1)
        self.assertEqual(merged["meta"]["tool"], "flashbench")
        self.assertEqual(merged["meta"]["peers"], [{"tool": "torch_sdpa.py"}])
        cuda = [r for r in merged["rows"] if r["backend"] == "cuda"]
        self.assertEqual(sorted((r["problem"]["seq"], r["problem"]["batch"], r["problem"]["causal"]) for r in cuda),
                         [(128, 4, False), (128, 4, True), (256, 2, False), (256, 2, True)])
        self.assertEqual(merged["rows"][-1], peer_row)
        self.assertIn("5 rows from 5 files -> " + os.path.join(out, "sweep.json"), result.stdout)
        self.assertEqual(cuda[0]["impl"], "v2.split")  # rows as the runs wrote them
        self.assertEqual(self.calls(), [])  # SKIP_CHECK: nothing configured or built
        with open(os.path.join(out, "summary.md"), encoding="utf-8") as handle:
            self.assertTrue(handle.read().startswith("| d | shapes | N | bwd: FA2 ÷ ours |"))
        self.assertTrue(os.path.exists(os.path.join(out, "table.md")))

    def test_gpu_bench_cold_rows_beside_warm_ones(self):
        build = self.fake_gpu_build()
        out = os.path.join(self.tmp.name, "sweep")
        result = self.run_script("gpu-bench.sh", out, BUILD_DIR=build, SKIP_CHECK="1", SKIP_PEERS="1",
                                 SEQS="128 256", COLD_SEQS="256", TOKENS="512", HEADS="2", HEAD_DIM="64",
                                 MASKS="false true")
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        self.assertEqual(sorted(os.listdir(os.path.join(out, "rows")))[:2],
                         ["cold-d64-n256-causal-false.jsonl", "cold-d64-n256-causal-true.jsonl"])
        with open(os.path.join(out, "sweep.json"), encoding="utf-8") as handle:
            merged = json.load(handle)
        self.assertFalse(any(row.get("cold") for row in merged["rows"]))  # the sweep stays warm
        with open(os.path.join(out, "table-warm-cold.md"), encoding="utf-8") as handle:
            lines = [line for line in handle.read().splitlines() if line.startswith("| v2.split")]
        self.assertEqual(lines, ["| v2.split | 64 | 256 | no | 1.000 | 1.000 | 2.500 | 3.000 | 1.20 |",
                                 "| v2.split | 64 | 256 | yes | 1.000 | 1.000 | 2.500 | 3.000 | 1.20 |"])

    def test_gpu_bench_extra_head_dims_at_their_own_lengths(self):
        build = self.fake_gpu_build()
        out = os.path.join(self.tmp.name, "sweep")
        result = self.run_script("gpu-bench.sh", out, BUILD_DIR=build, SKIP_CHECK="1", SKIP_PEERS="1",
                                 SEQS="128 256", TOKENS="512", HEADS="2", HEAD_DIMS="64", MASKS="true",
                                 EXTRA_HEAD_DIMS="192 256", EXTRA_SEQS="512", COLD_SEQS="256")
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        self.assertEqual(sorted(os.listdir(os.path.join(out, "rows"))),
                         ["cold-d64-n256-causal-true.jsonl", "cuda-d192-n512-causal-true.jsonl",
                          "cuda-d256-n512-causal-true.jsonl", "cuda-d64-n128-causal-true.jsonl",
                          "cuda-d64-n256-causal-true.jsonl"])
        with open(os.path.join(out, "sweep.json"), encoding="utf-8") as handle:
            merged = json.load(handle)
        self.assertEqual(sorted((r["problem"]["head_dim"], r["problem"]["seq"], r["problem"]["batch"])
                                for r in merged["rows"]),
                         [(64, 128, 4), (64, 256, 2), (192, 512, 1), (256, 512, 1)])

    # scripts/gpu-ab.sh

    def ab_build(self, name, tests_exit=None, verdict=None):
        """A build folder holding the real flashbench, and (tests_exit given) a fake
        tests/flashbench_tests that records its arguments, prints gtest's verdict lines and exits with
        tests_exit."""
        build = os.path.join(self.tmp.name, name)
        os.makedirs(os.path.join(build, "tests"))
        os.symlink(os.path.abspath(sys.argv[1]), os.path.join(build, "flashbench"))
        if tests_exit is not None:
            if verdict is None:
                verdict = "[  PASSED  ] 3 tests." if tests_exit == 0 else "[  FAILED  ] Gpu/CudaVsFloat64.x"
            executable(os.path.join(build, "tests", "flashbench_tests"),
                       f"#!/bin/sh\necho \"$@\" > {build}/tests-args\nprintf '%s\\n' '{verdict}'\n"
                       f"exit {tests_exit}\n")
        return build

    AB_RUN = ["--backend", "cpu", "--impl", "v2", "--seq", "32", "--heads", "1", "--head-dim", "8", "--threads", "1",
              "--max-time", "0.02"]

    def test_gpu_ab_tests_the_candidate_then_alternates(self):
        baseline, candidate = self.ab_build("baseline"), self.ab_build("candidate", tests_exit=0)
        out = os.path.join(self.tmp.name, "ab")
        result = self.run_script("gpu-ab.sh", out, baseline, candidate, *self.AB_RUN, ROUNDS="2")
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        with open(os.path.join(candidate, "tests-args"), encoding="utf-8") as handle:
            self.assertIn("--gtest_filter=Gpu/CudaVsFloat64.*v2*:Gpu/CudaWorkloads.*:Determinism*", handle.read())
        written = lambda name: os.stat(os.path.join(out, name + ".json")).st_mtime_ns
        self.assertLess(written("baseline-r1"), written("candidate-r1"))  # round 1: baseline first
        self.assertLess(written("candidate-r1"), written("candidate-r2"))
        self.assertLess(written("candidate-r2"), written("baseline-r2"))  # round 2: candidate first
        for round_ in (1, 2):
            with open(os.path.join(out, f"compare-r{round_}.md"), encoding="utf-8") as handle:
                table = handle.read()
            self.assertIn(f"A = `{out}/baseline-r{round_}.json`, B = `{out}/candidate-r{round_}.json`", table)
            self.assertIn("| cpu | v2 | B=1 H=1 N=32 d=8 L=1 fp32 |", table)
        self.assertIn("round 2 (candidate baseline):", result.stdout)
        # all rounds together: each side's runs merged as rounds, then one comparison
        self.assertIn("all 2 rounds:", result.stdout)
        with open(os.path.join(out, "compare.md"), encoding="utf-8") as handle:
            table = handle.read()
        self.assertIn(f"A = `{out}/baseline.json`, B = `{out}/candidate.json`", table)
        self.assertIn("| cpu | v2 | B=1 H=1 N=32 d=8 L=1 fp32 |", table)
        with open(os.path.join(out, "candidate.json"), encoding="utf-8") as handle:
            merged = json.load(handle)
        self.assertEqual(merged["meta"]["rounds"], 2)
        for row in merged["rows"]:
            self.assertEqual(len(row["timing"]["bwd"]["round_medians_ms"]), 2)

    def test_gpu_ab_does_not_time_a_candidate_that_fails_its_tests(self):
        baseline, candidate = self.ab_build("baseline"), self.ab_build("candidate", tests_exit=1)
        out = os.path.join(self.tmp.name, "ab")
        result = self.run_script("gpu-ab.sh", out, baseline, candidate, *self.AB_RUN)
        self.assertEqual(result.returncode, 4, result.stderr + result.stdout)
        self.assertIn("[  FAILED  ] Gpu/CudaVsFloat64.x", result.stderr)
        self.assertIn("the candidate fails its tests", result.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["tests.txt"])

    def test_gpu_ab_does_not_time_a_candidate_whose_tests_did_not_run(self):
        baseline = self.ab_build("baseline")
        for name, verdict in [("none", "[  PASSED  ] 0 tests."),
                              ("skipped", "[  PASSED  ] 3 tests.\n[  SKIPPED ] 89 tests, listed below:")]:
            candidate = self.ab_build(name, tests_exit=0, verdict=verdict)
            out = os.path.join(self.tmp.name, "ab-" + name)
            result = self.run_script("gpu-ab.sh", out, baseline, candidate, *self.AB_RUN)
            self.assertEqual(result.returncode, 4, result.stderr + result.stdout)
            self.assertIn("not every selected test of the candidate ran", result.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["tests.txt"])

    def test_gpu_ab_usage_errors(self):
        baseline = self.ab_build("baseline")
        out = os.path.join(self.tmp.name, "ab")
        with open(os.path.join(self.tmp.name, "file"), "w", encoding="utf-8"):
            pass  # a file where the output folder's parent should be
        for args, env, message in [((out, baseline), {}, "usage: scripts/gpu-ab.sh"),
                                   ((out, baseline, self.tmp.name), {}, "no flashbench in"),
                                   ((out, baseline, baseline), {}, "no tests/flashbench_tests"),
                                   ((out, baseline, baseline), {"ROUNDS": "0"}, "ROUNDS must be"),
                                   ((out, baseline, baseline), {"ROUNDS": "3"}, "ROUNDS must be a positive even"),
                                   ((os.path.join(self.tmp.name, "file", "out"), baseline, baseline),
                                    {"SKIP_TESTS": "1"}, "cannot create the output folder")]:
            result = self.run_script("gpu-ab.sh", *args, **env)
            self.assertEqual(result.returncode, 2, args)
            self.assertIn(message, result.stderr)
            self.assertEqual(result.stdout, "")
            self.assertFalse(os.path.exists(out), args)  # nothing left behind


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
