#!/usr/bin/env python3
"""What a person sees of `run` on a terminal (a pty, as tmux or a terminal emulator gives) and
through a pipe:

1. On a terminal the progress line is cleared before anything else is printed: the screen, replayed
   from the bytes written (carriage return, erase-to-end-of-line, newline), keeps no "[k/n] ..."
   line once the run is over, and none above any table.
2. Each configuration's table appears as that configuration finishes: the first block is on the
   screen before the second configuration's progress line is drawn.
3. Into a pipe: no progress line and no escape sequence, the same tables.

usage: tests/cli/progress_terminal_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from checks import check, summary  # noqa: E402
from terminal import run_on_terminal  # noqa: E402

RUN = ["run", "--seq", "96,160", "--heads", "1", "--head-dim", "16", "--variant", "standard,v2",
       "--max-time", "0.05", "--threads", "1"]
PROGRESS = re.compile(r"\[\d+/\d+\] \d+%")


def screen(text):
    """The lines a terminal shows after `text`: \\r returns to the line's start, ESC[K erases to its
    end, \\n goes down; other escapes (colours) are dropped."""
    lines, line, column = [], [], 0
    for token in re.findall(r"\x1b\[K|\x1b\[[0-9;]*[A-Za-z]|\r|\n|[^\x1b\r\n]", text):
        if token == "\r":
            column = 0
        elif token == "\n":
            lines.append("".join(line))
            line, column = [], 0
        elif token == "\x1b[K":
            del line[column:]
        elif token.startswith("\x1b"):
            continue
        else:
            if column < len(line):
                line[column] = token
            else:
                line.append(token)
            column += 1
    lines.append("".join(line))
    return lines


def main():
    binary = sys.argv[1]
    code, text, _ = run_on_terminal([binary, *RUN], env={"COLUMNS": "120"})
    check(code == 0, f"the run on a terminal exits 0 ({code})")
    shown = screen(text)
    left = [line for line in shown if PROGRESS.search(line)]
    check(not left, f"no progress line stays on the screen ({left[:2]})")
    check(any("N=96" in line for line in shown) and any("N=160" in line for line in shown),
          "both configurations' tables are on the screen")
    first_block = text.find("cpu: B=1 H=1 N=96")
    second_progress = text.find("[2/2]")
    check(0 <= first_block < second_progress,
          f"the first table is printed before the second configuration starts (at {first_block}, "
          f"the second's progress at {second_progress})")

    piped = subprocess.run([binary, *RUN], capture_output=True, text=True, timeout=120)
    check(piped.returncode == 0, f"the run into a pipe exits 0 ({piped.stderr.strip()[:200]})")
    both = piped.stdout + piped.stderr
    check(not PROGRESS.search(both) and "\x1b" not in both and "\r" not in both,
          "into a pipe: no progress line, no escape sequence, no carriage return")
    check("N=96" in piped.stdout and "N=160" in piped.stdout, "into a pipe: both tables")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
