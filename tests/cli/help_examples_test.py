#!/usr/bin/env python3
"""The examples at the foot of `flashbench --help` are real commands: each one runs as written, a
`run` with --dry-run appended (the plan of the same command line, parsed and validated whole, the
device opened, nothing measured), the others as they are, in a scratch folder; and no subcommand's
--help repeats them (they were inherited by `grad`, `info`, `model` and `fit`).

usage: tests/cli/help_examples_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
import tempfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def main():
    binary = os.path.abspath(sys.argv[1])
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout
    check("Examples:" in text, "flashbench --help has examples")
    block = text.split("Examples:", 1)[1] if "Examples:" in text else ""
    examples = [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if "flashbench " in line]
    check(len(examples) >= 5, f"{len(examples)} examples")
    with tempfile.TemporaryDirectory() as tmp:
        for example in examples:
            inner = re.fullmatch(r"source <\((flashbench .*)\)", example)  # a script for the shell to load
            words = shlex.split(inner.group(1) if inner else example)
            check(words[0] == "flashbench", f"starts with flashbench: {example}")
            args = words[1:]
            if args[0] == "run" and "--dry-run" not in args:
                args.append("--dry-run")
            done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, cwd=tmp)
            check(done.returncode == 0 and done.stdout, f"{' '.join(args)}: exit {done.returncode} "
                                                          f"{done.stderr.strip()[-200:]!r}")
    # The top-level examples are the top level's: no subcommand's --help repeats the block (its
    # last line is the top level's alone).
    last_line = "Each command's own --help lists its options."
    check(last_line in text, "the top-level examples end with the pointer to each command's --help")
    for command in ("run", "grad", "info", "model", "fit", "compare", "merge", "completion"):
        own = subprocess.run([binary, command, "--help"], capture_output=True, text=True, timeout=60).stdout
        check(own and last_line not in own, f"{command} --help does not repeat the top-level examples")

    # Every help text keeps to the terminal's width (COLUMNS here), wrapped at words, nothing lost.
    for width in (100, 80):
        for command in ("", "run", "grad", "info", "model", "fit", "compare", "merge", "completion"):
            args = [binary, *([command] if command else []), "--help"]
            own = subprocess.run(args, capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "COLUMNS": str(width)}).stdout
            wide = [line for line in own.splitlines() if len(line) > width]
            check(own and not wide, f"flashbench {command} --help at COLUMNS={width}: {len(wide)} wider lines {wide[:1]}")
    wrapped = subprocess.run([binary, "run", "--help"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": "80"}).stdout
    check(" ".join(wrapped.split()).count("FLASHBENCH_PLUGINS (colon-separated) adds more") == 1,
          "a wrapped description keeps every word, in order")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
