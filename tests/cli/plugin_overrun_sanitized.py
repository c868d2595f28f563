#!/usr/bin/env python3
"""A plugin that writes past the end of a buffer flashbench gave it (broken.overrun: one float past
dQ) is caught by the sanitized build (scripts/sanitize.sh): AddressSanitizer names the overflow and
the plugin's function, and the process ends non-zero. Registered only in a FLASHBENCH_SANITIZE
build: without the sanitizer the write lands silently in the allocator's memory.

usage: tests/cli/plugin_overrun_sanitized.py FLASHBENCH_BINARY SOURCE_DIR
"""
import subprocess
import sys
from pathlib import Path


def main():
    binary = sys.argv[1]
    broken = Path(binary).resolve().parent / "plugins" / "broken_plugin.so"
    # d = 16 in fp32: dQ's 1·1·16·16·4 bytes are a whole number of the host space's 64-byte blocks,
    # so the float after its end is the sanitizer's red zone, not the block's rounding.
    result = subprocess.run([binary, "run", "--plugin", str(broken), "--impl", "broken.overrun", "--seq", "16",
                             "--heads", "1", "--head-dim", "16", "--threads", "1", "--max-time", "0.2"],
                            capture_output=True, text=True, timeout=300)
    caught = (result.returncode != 0 and "AddressSanitizer: heap-buffer-overflow" in result.stderr
              and "overrun_backward" in result.stderr)
    print(f"{'ok' if caught else 'FAIL'} the overrun is caught: exit {result.returncode}")
    if not caught:
        print(result.stderr[-4000:])
    return 0 if caught else 1


if __name__ == "__main__":
    sys.exit(main())
