"""Run a command in a child process from a test: output captured as text, never
raising on a failure (the test asserts on the return code and prints the stderr)."""

import json
import subprocess
import sys


def run(argv, *, env=None, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def python(*args, **kwargs) -> subprocess.CompletedProcess:
    """This interpreter with ``args`` (``"-c", code`` or a script and its arguments)."""
    return run([sys.executable, *args], **kwargs)


def marked_json(stdout: str, mark: str):
    """The JSON after the last line of ``stdout`` that starts with ``mark``."""
    line = [ln for ln in stdout.splitlines() if ln.startswith(mark)][-1]
    return json.loads(line[len(mark) :])
