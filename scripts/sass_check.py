"""What the GPU really runs, from the machine code of a flashbench build (docs/cuda-design.md reads it
after every kernel change): for each kernel, its instruction count, its warpgroup matrix products
(HGMMA), its bulk tensor copies and reductions (UTMALDG, UTMAREDG) and its local-memory traffic
(LDL, STL: registers spilled, or arrays the compiler could not keep in registers).

The Hopper kernels (those compiled for sm_90a) must use HGMMA and must touch no local memory; any
other kernel that does is listed too. Exit status 1 when a Hopper kernel breaks either rule (or, with
--no-local-memory, when any kernel touches local memory), 2 when the dump cannot be had or read or
holds no kernel, 3 when there is no cuobjdump to ask.

Usage: python3 scripts/sass_check.py BINARY [--cuobjdump PATH] [--no-local-memory]
       python3 scripts/sass_check.py --sass DUMP.txt     (the text of `cuobjdump --dump-sass`)
"""
import argparse
import re
import shutil
import subprocess
import sys

HOPPER_ARCH = "sm_90a"
COUNTED = ("HGMMA", "UTMALDG", "UTMAREDG", "LDL", "STL")  # opcodes, suffixes aside

ARCH_LINE = re.compile(r"^\s*code for (sm_\w+)")
FUNCTION_LINE = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "/*0a40*/   @!P0 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;": the opcode after an optional predicate.
INSTRUCTION_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


class SassError(Exception):
    def __init__(self, message, status=2):
        super().__init__(message)
        self.status = status


def parse(text):
    """[{"name", "arch", "instructions", "HGMMA", "UTMALDG", "UTMAREDG", "LDL", "STL"}] in dump order."""
    kernels, arch, current = [], None, None
    for line in text.splitlines():
        match = ARCH_LINE.match(line)
        if match:
            arch = match.group(1)
            continue
        match = FUNCTION_LINE.match(line)
        if match:
            current = {"name": match.group(1), "arch": arch or "?", "instructions": 0, **{op: 0 for op in COUNTED}}
            kernels.append(current)
            continue
        match = INSTRUCTION_LINE.match(line)
        if match and current is not None:
            current["instructions"] += 1
            if match.group(1) in COUNTED:
                current[match.group(1)] += 1
    return kernels


def demangled(names):
    """The names through c++filt where it is installed, as they are where not."""
    tool = shutil.which("c++filt")
    if tool is None or not names:
        return list(names)
    result = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=False)
    lines = result.stdout.splitlines()
    return lines if result.returncode == 0 and len(lines) == len(names) else list(names)


def short_name(name):
    """`void ns::(anonymous namespace)::kernel<A, B>(args)` -> `kernel<A, B>`."""
    head = name.replace("(anonymous namespace)::", "").split("(", 1)[0]
    head = head[len("void "):] if head.startswith("void ") else head
    template = head.find("<")
    prefix, rest = (head[:template], head[template:]) if template >= 0 else (head, "")
    return prefix.rsplit("::", 1)[-1] + rest


def problems(kernels, no_local_memory):
    """The broken rules, one line each."""
    lines = []
    for kernel in kernels:
        local = kernel["LDL"] + kernel["STL"]
        if kernel["arch"] == HOPPER_ARCH and kernel["HGMMA"] == 0:
            lines.append(f"{kernel['short']}: compiled for {HOPPER_ARCH} but has no HGMMA")
        if local and (kernel["arch"] == HOPPER_ARCH or no_local_memory):
            lines.append(f"{kernel['short']} ({kernel['arch']}): {kernel['LDL']} LDL and {kernel['STL']} STL")
    return lines


def markdown(kernels):
    lines = ["| kernel | arch | instructions | HGMMA | UTMALDG | UTMAREDG | LDL | STL |", "|" + "---|" * 8]
    for kernel in sorted(kernels, key=lambda k: (k["arch"], k["short"])):
        lines.append(f"| `{kernel['short']}` | {kernel['arch']} | {kernel['instructions']} | {kernel['HGMMA']} | "
                     f"{kernel['UTMALDG']} | {kernel['UTMAREDG']} | {kernel['LDL']} | {kernel['STL']} |")
    return "\n".join(lines)


def dump_of(args):
    if args.sass:
        try:
            with open(args.sass, encoding="utf-8") as handle:
                return handle.read()
        except OSError as error:
            raise SassError(f"cannot read '{args.sass}': {error.strerror}") from error
        except UnicodeDecodeError as error:
            raise SassError(f"'{args.sass}' is not the text of cuobjdump --dump-sass") from error
    tool = args.cuobjdump or shutil.which("cuobjdump")
    if tool is None:
        raise SassError("no cuobjdump on the PATH (it comes with the CUDA toolkit; or give --cuobjdump PATH)", 3)
    try:
        result = subprocess.run([tool, "--dump-sass", args.binary], capture_output=True, text=True, errors="replace",
                                check=False)
    except OSError as error:
        raise SassError(f"cannot run '{tool}': {error.strerror}") from error
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise SassError(f"cuobjdump --dump-sass {args.binary} failed: {message}")
    return result.stdout


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("binary", nargs="?", help="a flashbench executable (or any CUDA object or library)")
    source.add_argument("--sass", help="a saved `cuobjdump --dump-sass` text instead of a binary")
    parser.add_argument("--cuobjdump", help="the cuobjdump to use (default: the one on the PATH)")
    parser.add_argument("--no-local-memory", action="store_true",
                        help="fail on local memory in any kernel, not only in the sm_90a ones")
    args = parser.parse_args(argv)
    try:
        kernels = parse(dump_of(args))
    except SassError as error:
        print(f"sass_check: {error}", file=sys.stderr)
        return error.status
    if not kernels:
        print("sass_check: no kernels in the dump (a build without CUDA?)", file=sys.stderr)
        return 2
    for kernel, name in zip(kernels, demangled([k["name"] for k in kernels])):
        kernel["short"] = short_name(name)
    print(markdown(kernels))
    broken = problems(kernels, args.no_local_memory)
    for line in broken:
        print(f"sass_check: {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
