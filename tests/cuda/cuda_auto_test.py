#!/usr/bin/env python3
"""FLASHBENCH_CUDA=AUTO builds the CUDA backend only where nvcc is found AND a GPU is visible; ON
builds it wherever nvcc is; OFF never. Each decision is one status line that says why.

The GPU is faked both ways: the device node is pointed at a file that exists or not, and a fake
`nvidia-smi` on PATH lists a GPU or fails. Configures cmake/Cuda.cmake alone
(tests/data/cuda_probe), not the whole project. Where nvcc is absent, AUTO and ON cannot build it
and the test checks that they say so.

usage: tests/cuda/cuda_auto_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def configure(source, tmp, name, request, device_node, smi_lists_gpu):
    """Configures the probe in a fresh folder; returns (exit code, status line, FLASHBENCH_CUDA_BOOL)."""
    fake_bin = tmp / f"{name}-bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    if smi_lists_gpu:
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)'\n")
    else:
        smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver.'\nexit 9\n")
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake_bin}:{os.environ.get('PATH', '')}")
    env.pop("CUDACXX", None)
    result = subprocess.run(
        ["cmake", "-S", str(source), "-B", str(tmp / name), f"-DFLASHBENCH_CUDA={request}",
         f"-DFLASHBENCH_GPU_DEVICE_NODE={device_node}"],
        capture_output=True, text=True, env=env, timeout=240)
    lines = result.stdout.splitlines()
    status = [line for line in lines if line.startswith("-- flashbench: CUDA backend")]
    value = [line.split("=", 1)[1] for line in lines if line.startswith("-- cuda_probe: FLASHBENCH_CUDA_BOOL=")]
    print(f"  {name}: exit {result.returncode}, {status}")
    if result.returncode != 0:
        print(result.stderr)
    return result.returncode, status, value[0] if value else None


def main():
    source = Path(sys.argv[2]) / "tests" / "data" / "cuda_probe"
    nvcc = shutil.which("nvcc") or (Path("/usr/local/cuda/bin/nvcc").exists() and "/usr/local/cuda/bin/nvcc")
    print(f"nvcc: {nvcc or 'none'}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        absent = tmp / "no-such-device"
        present = tmp / "nvidia0"
        present.write_text("")

        code, status, value = configure(source, tmp, "off", "OFF", present, True)
        check(code == 0 and value == "false", "OFF builds no CUDA even with a GPU")
        check(status == ["-- flashbench: CUDA backend OFF (FLASHBENCH_CUDA=OFF)"], "OFF says so in one line")

        code, status, value = configure(source, tmp, "auto-no-gpu", "AUTO", absent, False)
        check(code == 0 and value == "false", "AUTO without a GPU builds no CUDA")
        want = "nvcc found, but no GPU here" if nvcc else "no nvcc found"
        check(len(status) == 1 and "OFF" in status[0] and want in status[0], f"AUTO without a GPU says '{want}'")

        for name, node, smi in (("auto-device-node", present, False), ("auto-nvidia-smi", absent, True)):
            code, status, value = configure(source, tmp, name, "AUTO", node, smi)
            if nvcc:
                check(code == 0 and value == "true", f"{name}: AUTO with nvcc and a GPU builds CUDA")
                check(len(status) == 1 and "ON (a GPU is here;" in status[0], f"{name}: the line says a GPU is here")
            else:
                check(code == 0 and value == "false", f"{name}: AUTO without nvcc builds no CUDA")

        code, status, value = configure(source, tmp, "on-no-gpu", "ON", absent, False)
        if nvcc:
            check(code == 0 and value == "true", "ON builds CUDA without a GPU (CI, the GPU scripts)")
            check(len(status) == 1 and "ON (FLASHBENCH_CUDA=ON;" in status[0], "ON says it was asked for")
        else:
            check(code != 0, "ON without nvcc stops the configuration")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
