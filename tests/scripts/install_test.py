#!/usr/bin/env python3
"""scripts/install.sh (which scripts/setup.sh calls) puts the built binary at PREFIX/bin/flashbench,
where it runs by name once PREFIX/bin is on PATH; it says so when that folder is not on PATH.

usage: tests/scripts/install_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def install(source, build_dir, prefix, path):
    env = dict(os.environ, FLASHBENCH_PREFIX=str(prefix), PATH=path)
    return subprocess.run([str(source / "scripts" / "install.sh"), str(build_dir)], capture_output=True, text=True,
                          env=env, timeout=120)


def main():
    binary = Path(sys.argv[1])
    source = Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "prefix"
        installed = prefix / "bin" / "flashbench"

        result = install(source, binary.parent, prefix, os.environ["PATH"])
        print(result.stdout, result.stderr)
        check(result.returncode == 0, "install.sh exits 0")
        check(installed.is_file() and os.access(installed, os.X_OK), f"{installed} is an executable")
        check(f"installed {installed}" in result.stdout, "it names where the binary went")
        check(f"{prefix / 'bin'} is not on PATH" in result.stdout and "export PATH=" in result.stdout,
              "a folder not on PATH gets a note with the line that adds it")

        on_path = f"{prefix / 'bin'}:{os.environ['PATH']}"
        result = install(source, binary.parent, prefix, on_path)
        check(result.returncode == 0 and "not on PATH" not in result.stdout, "no note once the folder is on PATH")

        # By name, as the README writes it: the installed binary is the built one.
        by_name = subprocess.run(["flashbench", "--version"], capture_output=True, text=True, timeout=60,
                                 env=dict(os.environ, PATH=on_path))
        built = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
        check(by_name.returncode == 0 and by_name.stdout == built.stdout and by_name.stdout.startswith("flashbench "),
              f"`flashbench --version` by name: {by_name.stdout.strip()!r}")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
