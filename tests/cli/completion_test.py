#!/usr/bin/env python3
"""`flashbench completion bash|zsh|fish` is written from the command line's own definition: every
option of every subcommand, as `--help` lists it, is in each script; bash sources the bash script and
completes with it; zsh and fish check theirs where they are installed.

usage: tests/cli/completion_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402


def run(*args, **kwargs):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, **kwargs)


def subcommands(binary):
    text = run(binary, "--help").stdout
    section = text.split("Subcommands:", 1)[1].split("Examples:", 1)[0]
    # A subcommand's name starts its line at two spaces; a wrapped description continues deeper.
    return [line.split()[0] for line in section.splitlines() if re.match(r"^  \S", line)]


def help_options(binary, command):
    # The option column of `flashbench COMMAND --help`: every -x and --long name, not the descriptions.
    names = set()
    for line in run(binary, command, "--help").stdout.splitlines():
        match = re.match(r"^  (-[^ ].*?)(?:  |$)", line)
        if match:
            names.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", match.group(1)))
    return names


def main():
    binary = sys.argv[1]
    commands = subcommands(binary)
    check({"run", "model", "completion"} <= set(commands), f"subcommands from --help: {commands}")
    scripts = {shell: run(binary, "completion", shell) for shell in ("bash", "zsh", "fish")}
    for shell, done in scripts.items():
        check(done.returncode == 0 and done.stdout, f"completion {shell}: exit {done.returncode}")
    run_options = help_options(binary, "run")
    check(len(run_options) > 40 and {"--tokens", "--dry-run", "--export-json", "--seq", "-n"} <= run_options,
          f"run --help lists {len(run_options)} option names")
    for shell, done in scripts.items():
        missing = {command: sorted(o for o in help_options(binary, command)
                                   if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])"
                                                    if shell != "fish" else
                                                    rf"-[ls] {re.escape(o.lstrip('-'))}(?![\w-])", done.stdout))
                   for command in commands}
        missing = {c: m for c, m in missing.items() if m}
        check(not missing, f"{shell}: every option of every subcommand is in the script (missing: {missing})")

    bad = run(binary, "completion", "tcsh")
    check(bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, f"completion tcsh: {bad.stderr.strip()!r}")

    # bash loads it and completes with it, as a user's shell would.
    script = f"""
source <("{binary}" completion bash) || exit 1
complete -p flashbench || exit 1
complete_line() {{ COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _flashbench; echo "${{COMPREPLY[*]}}"; }}
echo "commands: $(complete_line flashbench '')"
echo "run: $(complete_line flashbench run --seq 4096 --dry)"
echo "model: $(complete_line flashbench model --tok)"
echo "shells: $(complete_line flashbench completion '')"
echo "dtype: $(complete_line flashbench run --dtype '')"
echo "variant: $(complete_line flashbench model --variant '')"
echo "impl: $(complete_line flashbench run --impl v2)"
echo "mask: $(complete_line flashbench run --mask b)"
echo "out: $(cd "{sys.argv[2]}" && complete_line flashbench run --out CMakeLis)"
"""
    done = run("bash", "-c", script)
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    check(done.returncode == 0 and "-F _flashbench" in done.stdout, f"bash sources it: {done.stdout[:80]!r} {done.stderr!r}")
    check(set(commands) <= set(lines.get("commands", "").split()), f"completes the subcommands: {lines.get('commands')}")
    check(lines.get("run") == "--dry-run", f"completes run --dry -> {lines.get('run')!r}")
    check(lines.get("model") == "--tokens", f"completes model --tok -> {lines.get('model')!r}")
    check(lines.get("shells", "").split() == ["bash", "zsh", "fish"], f"completes the shells: {lines.get('shells')!r}")
    # Values from a known set complete as those words, not as file names; a file's value as a file.
    check(lines.get("dtype", "").split() == ["fp32", "bf16", "fp16"], f"completes run --dtype: {lines.get('dtype')!r}")
    check(lines.get("variant", "").split() == ["standard", "v1", "v2", "checkpoint", "all"],
          f"completes model --variant: {lines.get('variant')!r}")
    impls = lines.get("impl", "").split()
    check("v2" in impls and all(i.startswith("v2") for i in impls), f"completes run --impl v2: {impls}")
    check(lines.get("mask") == "both", f"completes run --mask b: {lines.get('mask')!r}")
    check(lines.get("out") == "CMakeLists.txt", f"completes run --out as a file: {lines.get('out')!r}")

    if shutil.which("zsh"):
        done = run("zsh", "-c", f'autoload -U compinit && compinit -u && source <("{binary}" completion zsh) && '
                                'print -r -- $_comps[flashbench]')
        check(done.returncode == 0 and done.stdout.strip() == "_flashbench", f"zsh loads it: {done.stdout!r} {done.stderr!r}")
    else:
        print("note: zsh is not installed; its script is checked for the options only")
    if shutil.which("fish"):
        done = run("fish", "-c", f'"{binary}" completion fish | source; complete -C"flashbench run --dry"')
        check(done.returncode == 0 and "--dry-run" in done.stdout, f"fish completes run --dry: {done.stdout!r}")
    else:
        print("note: fish is not installed; its script is checked for the options only")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
