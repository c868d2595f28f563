"""scripts/ptxas-guard.sh, the compiler launcher of the sm_90a kernels: it passes a compile's output
and status through, and fails a compile that succeeded when ptxas reported serialized wgmma products
(C7511 for want of registers, or another code with the same message), naming the kernels and codes;
other ptxas info lines (C7519, the register reports) and other text that mentions C7511 pass. The
compile here is a stand-in command that prints what ptxas prints, so no CUDA is needed.

Run by CTest as: python3 tests/scripts/ptxas_guard_test.py FLASHBENCH_BINARY SOURCE_DIR.
"""
import os
import subprocess
import sys
import unittest

SOURCE_DIR = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))
GUARD = os.path.join(SOURCE_DIR, "scripts", "ptxas-guard.sh")
KERNEL = "_ZN10flashbench4cuda14forward_kernelI6__halfLi128ELi96ELb0EEEvv"
C7511 = ("ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized "
         f"due to insufficient register resources for the wgmma pipeline in the function '{KERNEL}'")
C7515 = C7511.replace("(C7511)", "(C7515)").replace("insufficient register resources for the wgmma pipeline",
                                                 "non wgmma instructions defining accumulator registers")
C7519 = (f"ptxas info    : (C7519) warpgroup.arrive is injected in around line 10 by compiler to allow use "
         f"of registers in GMMA in function '{KERNEL}'")


def guard(script):
    """The guard around `bash -c script`."""
    return subprocess.run([GUARD, "bash", "-c", script], capture_output=True, text=True, timeout=60)


class PtxasGuard(unittest.TestCase):
    def test_serialized_products_fail_the_compile_and_name_the_kernel(self):
        for stream in (">&1", ">&2"):
            with self.subTest(stream=stream):
                result = guard(f'echo "{C7511}" {stream}; exit 0')
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertIn("(C7511)", result.stdout + result.stderr)  # ptxas's own line still shown
                error = result.stderr.strip().splitlines()[-1]
                self.assertTrue(error.startswith("error: ptxas serialized the wgmma products (C7511)"), error)
                self.assertIn("forward_kernel", error)
                self.assertIn("(C7511)", error)
                self.assertIn("FLASHBENCH_PTXAS_GUARD=OFF", error)

    def test_any_code_of_the_serialization_message_fails(self):
        result = guard(f'echo "{C7515}"; exit 0')
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("(C7515)", result.stderr.strip().splitlines()[-1])

    def test_other_info_lines_and_the_output_pass_through(self):
        result = guard(f'echo compiled; echo "{C7519}" >&2; echo "see C7511 in the notes"; exit 0')
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "compiled\nsee C7511 in the notes\n")
        self.assertEqual(result.stderr, C7519 + "\n")

    def test_a_failed_compile_keeps_its_status_and_message(self):
        result = guard(f'echo "x.cu(3): error: expected a ;" >&2; echo "{C7511}"; exit 3')
        self.assertEqual(result.returncode, 3)
        self.assertIn("expected a ;", result.stderr)
        self.assertNotIn("error: ptxas serialized", result.stderr)

    def test_no_command_is_a_usage_error(self):
        result = subprocess.run([GUARD], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 2)
        self.assertIn("usage:", result.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
