"""Running the binary on a pseudo-terminal, as tmux or a terminal emulator gives it, for the tests
of what a person sees (tests/cli/progress_terminal_test.py, tests/cli/run_options_test.py)."""
import os
import pty
import select
import subprocess


def run_on_terminal(command, stdout_too=True, env=None, timeout=120):
    """Runs `command` with stderr (and stdout, with `stdout_too`) on a pseudo-terminal. Returns its
    exit status, the text the terminal received, in order, and stdout when it went to a pipe ("")."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(command, stdin=terminal, stdout=terminal if stdout_too else subprocess.PIPE,
                               stderr=terminal, env={**os.environ, **(env or {})})
    os.close(terminal)
    received = b""
    while True:
        ready, _, _ = select.select([controller], [], [], timeout)
        if not ready:
            process.kill()
            break
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closes with the process
            break
        if not chunk:
            break
        received += chunk
    stdout, _ = process.communicate(timeout=timeout)
    os.close(controller)
    return process.returncode, received.decode("utf-8", "replace"), (stdout or b"").decode("utf-8", "replace")
