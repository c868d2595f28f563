"""scripts/sass_check.py on a made-up `cuobjdump --dump-sass` text: per kernel it counts the
instructions, HGMMA, the bulk tensor copies and local-memory loads and stores (predicated ones too),
names kernels by their demangled short name where c++filt is installed, and fails (exit 1, a line
each) when an sm_90a kernel has no HGMMA or touches local memory; other kernels' local memory fails
only with --no-local-memory; a missing or unreadable dump is one line and exit 2, no cuobjdump exit 3.

Run by CTest as: python3 tests/scripts/sass_check_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary is not needed).
"""
import contextlib
import io
import os
import shutil
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
import sass_check  # noqa: E402

GOOD_HOPPER = "_ZN10flashbench4cuda12_GLOBAL__N_114forward_kernelI13__nv_bfloat16Li128ELi128ELb0EEEvv"
BAD_HOPPER = "_ZN10flashbench4cuda12_GLOBAL__N_115backward_kernelI13__nv_bfloat16Li64ELi64ELb0EEEvv"
SIMT = "_ZN10flashbench4cuda12_GLOBAL__N_114simt_dq_kernelILi128ELb0EEEvv"

DUMP = f"""
Fatbin elf code:
================
arch = sm_90a
code version = [1,8]
host = linux
compile_size = 64bit

\tcode for sm_90a
\t\tFunction : {GOOD_HOPPER}
\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                      /* 0x00000a00ff017b82 */
        /*0010*/                   UTMALDG.3D [UR8], [UR4] ;                                  /* 0x0000000804007db4 */
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;       /* 0x00e00004181879f0 */
                                                                                              /* 0x000fe20008000818 */
        /*0030*/             @!UP0 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;            /* 0x00e00008181879f0 */
        /*0040*/                   EXIT ;                                                     /* 0x000000000000794d */
\t\t..........

\t\tFunction : {BAD_HOPPER}
\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                      /* 0x00000a00ff017b82 */
        /*0010*/                   STL.64 [R1+0x8], R4 ;                                      /* 0x0000080401007387 */
                                                                                              /* 0x000fe20000100a00 */
        /*0020*/                @P1 LDL.LU R4, [R1+0x8] ;                                     /* 0x0000080001047983 */
        /*0030*/                   EXIT ;                                                     /* 0x000000000000794d */
\t\t..........

Fatbin elf code:
================
arch = sm_90

\tcode for sm_90
\t\tFunction : {SIMT}
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                      /* 0x00000a00ff017b82 */
        /*0010*/                   STL [R1], R2 ;                                             /* 0x0000000201007387 */
        /*0020*/                   EXIT ;                                                     /* 0x000000000000794d */
"""


def run(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = sass_check.main(args)
    return status, out.getvalue(), err.getvalue()


class SassCheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dump = os.path.join(self.tmp.name, "dump.txt")
        with open(self.dump, "w", encoding="utf-8") as handle:
            handle.write(DUMP)

    def tearDown(self):
        self.tmp.cleanup()

    def test_counts_per_kernel(self):
        kernels = sass_check.parse(DUMP)
        self.assertEqual([(k["name"], k["arch"]) for k in kernels],
                         [(GOOD_HOPPER, "sm_90a"), (BAD_HOPPER, "sm_90a"), (SIMT, "sm_90")])
        counts = [(k["instructions"], k["HGMMA"], k["UTMALDG"], k["LDL"], k["STL"]) for k in kernels]
        self.assertEqual(counts, [(5, 2, 1, 0, 0), (4, 0, 0, 1, 1), (3, 0, 0, 0, 1)])

    def test_hopper_kernels_need_hgmma_and_no_local_memory(self):
        status, out, err = run(["--sass", self.dump])
        self.assertEqual(status, 1)
        problems = err.strip().splitlines()
        self.assertEqual(len(problems), 2, err)  # the sm_90 kernel's STL does not count here
        self.assertTrue(all(line.startswith("sass_check: ") for line in problems))
        self.assertIn("has no HGMMA", problems[0])
        self.assertIn("1 LDL and 1 STL", problems[1])
        self.assertEqual(len([l for l in out.splitlines() if l.startswith("| `")]), 3)
        if shutil.which("c++filt"):
            self.assertIn("| `forward_kernel<__nv_bfloat16, 128, 128, false>` | sm_90a | 5 | 2 | 1 | 0 | 0 | 0 |", out)
            self.assertEqual(problems[0], "sass_check: backward_kernel<__nv_bfloat16, 64, 64, false>: compiled for "
                                          "sm_90a but has no HGMMA")

    def test_no_local_memory_extends_to_every_kernel(self):
        status, _, err = run(["--sass", self.dump, "--no-local-memory"])
        self.assertEqual(status, 1)
        self.assertEqual(len(err.strip().splitlines()), 3)
        self.assertIn("(sm_90): 0 LDL and 1 STL", err)

    def test_a_clean_build_passes(self):
        clean = DUMP.split("\t\tFunction : " + BAD_HOPPER)[0]
        with open(self.dump, "w", encoding="utf-8") as handle:
            handle.write(clean)
        status, out, err = run(["--sass", self.dump])
        self.assertEqual((status, err), (0, ""))
        self.assertEqual(len([l for l in out.splitlines() if l.startswith("| `")]), 1)

    def test_no_dump_is_one_line_and_status_2(self):
        status, out, err = run(["--sass", os.path.join(self.tmp.name, "missing.txt")])
        self.assertEqual((status, out), (2, ""))
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("missing.txt", err)
        status, _, err = run([os.path.join(self.tmp.name, "flashbench"), "--cuobjdump",
                              os.path.join(self.tmp.name, "no-such-cuobjdump")])
        self.assertEqual(status, 2)
        self.assertEqual(len(err.strip().splitlines()), 1)
        binary = os.path.join(self.tmp.name, "binary.txt")  # not text: one line, not a traceback
        with open(binary, "wb") as handle:
            handle.write(bytes(range(256)))
        status, out, err = run(["--sass", binary])
        self.assertEqual((status, out), (2, ""))
        self.assertIn("is not the text of cuobjdump --dump-sass", err)

    def test_no_cuobjdump_on_the_path_is_status_3(self):
        saved = os.environ.get("PATH", "")
        os.environ["PATH"] = self.tmp.name  # an empty folder: no cuobjdump there
        try:
            status, out, err = run([os.path.join(self.tmp.name, "flashbench")])
        finally:
            os.environ["PATH"] = saved
        self.assertEqual((status, out), (3, ""))
        self.assertIn("no cuobjdump on the PATH", err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
