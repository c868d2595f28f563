#!/usr/bin/env python3
"""A mistyped flag, command or preset gets one line naming the nearest one, and exit 2; a word near
nothing says where the names are listed. The presets answer to their names from the articles' titles
and to their first names, and `model --preset list` and `model --help` name them with the titles.

usage: tests/cli/cli_suggestions_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def expect_line(binary, args, line):
    result = run(binary, *args)
    check(result.returncode == 2 and result.stderr == line + "\n" and result.stdout == "",
          f"{' '.join(args)!r}: exit {result.returncode}, stderr {result.stderr!r}")


def main():
    binary = sys.argv[1]
    expect_line(binary, ["run", "--seqq", "4096"], "flashbench: unknown option --seqq; did you mean --seq?")
    expect_line(binary, ["run", "--seq", "64", "--thread", "2"],
                "flashbench: unknown option --thread; did you mean --threads?")
    expect_line(binary, ["run", "--seq=64", "--varaint=v2"],
                "flashbench: unknown option --varaint; did you mean --variant?")
    expect_line(binary, ["model", "--preest", "list"], "flashbench: unknown option --preest; did you mean --preset?")
    expect_line(binary, ["compare", "a.json", "--fial-on-regression"],
                "flashbench: unknown option --fial-on-regression; did you mean --fail-on-regression?")
    expect_line(binary, ["run", "--zzzzzz"],
                "flashbench: unknown option --zzzzzz (flashbench run --help lists the options)")
    expect_line(binary, ["rnu", "--seq", "64"], "flashbench: unknown command 'rnu'; did you mean run?")
    expect_line(binary, ["modle"], "flashbench: unknown command 'modle'; did you mean model?")
    result = run(binary, "benchmark")
    check(result.returncode == 2 and "unknown command 'benchmark' (expected one of: run," in result.stderr
          and len(result.stderr.splitlines()) == 1, f"a word near no command lists them: {result.stderr!r}")
    # A negative number is a value, not a mistyped flag: the error is CLI11's about the value.
    result = run(binary, "run", "--seq", "-5")
    check(result.returncode == 2 and "unknown option" not in result.stderr, f"--seq -5: {result.stderr.strip()!r}")

    # Presets: by title's name and by first name, the same figures.
    expect_line(binary, ["model", "--preset", "gradient-flwo"],
                "flashbench: unknown preset 'gradient-flwo'; did you mean gradient-flow? (--preset list names them)")
    expect_line(binary, ["model", "--preset", "seed-02"],
                "flashbench: unknown preset 'seed-02'; did you mean seed-002? (--preset list names them)")
    pairs = [("flashattention-backward", "seed-000"), ("gradient-flow", "seed-002"), ("backward-math", "seed-003"),
             ("activation-recomputation", "korthikanti")]
    listing = run(binary, "model", "--preset", "list")
    listed = json.loads(run(binary, "model", "--preset", "list", "--format", "json").stdout)
    help_text = run(binary, "model", "--help").stdout
    check(listing.returncode == 0, "--preset list exits 0")
    check([(p["name"], p["alias"]) for p in listed] == pairs, f"--preset list --format json: {listed}")
    for (name, alias), entry in zip(pairs, listed):
        by_name = json.loads(run(binary, "model", "--preset", name, "--format", "json").stdout)
        by_alias = json.loads(run(binary, "model", "--preset", alias, "--format", "json").stdout)
        check(by_name == by_alias and by_name["preset"] == name and by_name["alias"] == alias
              and by_name["title"] == entry["title"] and by_name["rows"],
              f"{name} and {alias} give the same preset, named {name}")
        line = next((l for l in listing.stdout.splitlines() if l.startswith(name + " ")), "")
        check(alias in line and entry["title"] in line, f"the listing names {name}, {alias} and the title: {line!r}")
        check(name in help_text and alias in help_text and entry["title"] in " ".join(help_text.split()),
              f"model --help names {name} ({alias}) with its title")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
