#!/usr/bin/env python3
"""Every link of the README and docs/ resolves: each Markdown link `[text](target)` to a file of the
repository (http(s) and mail links and in-page anchors are not followed; `#anchor` is dropped), and,
in the README and the documents at the top of docs/, each path written as code (`docs/usage.md`,
`scripts/gpu-bench.sh`, `src/cli/run.cpp`) that names a folder of the repository. The journal's
code paths are history (files of a round, `record-w15:results/...` at a tag) and are not checked.

usage: check_links.py [SOURCE_DIR]     exit 0: all resolve; 1: each broken one printed, FILE:LINE
"""
import re
import sys
from pathlib import Path

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\s]+)`")
# Code spans that are paths of the repository: they start with one of its top folders.
TOP = ("docs/", "scripts/", "src/", "include/", "tests/", "examples/", "configs/", "results/", "cmake/", ".ci/")
# A path written as a pattern or a placeholder (`results/h200/wgmma-w*`, `include/flashbench/<layer>/`)
# names a family of files, not one.
PATTERN = re.compile(r"[*<>{}…]|\.\.\.|X{2,}|NAME|PATH")


def documents(root):
    yield root / "README.md", True
    for path in sorted((root / "docs").rglob("*.md")):
        yield path, path.parent == root / "docs"


def broken_links(root):
    broken = []
    for path, check_code in documents(root):
        in_fence = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            for target in LINK.findall(line):
                if re.match(r"^(https?:|mailto:|#)", target):
                    continue
                file = target.split("#", 1)[0]
                if file and not (path.parent / file).exists():
                    broken.append(f"{path.relative_to(root)}:{number}: link to '{target}' does not resolve")
            if not check_code:
                continue
            for span in CODE.findall(line):
                candidate = span.split(":", 1)[0].rstrip(".,;")
                if not candidate.startswith(TOP) or PATTERN.search(candidate):
                    continue
                if not (root / candidate).exists():
                    broken.append(f"{path.relative_to(root)}:{number}: path '{candidate}' does not exist")
    return broken


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    broken = broken_links(root)
    for line in broken:
        print(line)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
