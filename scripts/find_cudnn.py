"""Where PyTorch's wheels keep cuDNN, for a machine where they carry the only one.

Prints the path of the libcudnn.so.9 of the nvidia-cudnn package (for FLASHBENCH_CUDNN_LIBRARY); with
--nvrtc-path, the lib folder of the nvidia-cuda-nvrtc package instead (for LD_LIBRARY_PATH where
cuDNN does not find NVRTC, which it loads for its runtime-compiled engines; only that folder, so that
flashbench's own cuBLAS and CUDA runtime stay the toolkit's). Exits 1, printing nothing, when the
package is not installed.

Usage: FLASHBENCH_CUDNN_LIBRARY=$(python3 scripts/find_cudnn.py) build-gpu/flashbench run ...
       LD_LIBRARY_PATH=$(python3 scripts/find_cudnn.py --nvrtc-path) build-gpu/flashbench run ...
"""
import sys
from pathlib import Path


def main():
    package, file = ("cuda_nvrtc", None) if "--nvrtc-path" in sys.argv[1:] else ("cudnn", "libcudnn.so.9")
    try:
        module = __import__(f"nvidia.{package}", fromlist=["__path__"])
    except ImportError:
        return 1
    for folder in module.__path__:
        lib = Path(folder) / "lib"
        if (lib / file).exists() if file else lib.is_dir():
            print(lib / file if file else lib)
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
