"""One child-process protocol: a clean environment, run, and a JSON answer back.

:func:`clean_env` builds the child's environment.  :func:`start` (or :func:`run`, which
also waits) runs a module or a script in a session of its own, so that a timeout kills
it and all it started; its output goes to files, never pipes, so a talkative child
cannot block.  The child answers with :func:`answer`, one marked JSON line on stdout;
:meth:`Child.result` reads the last one.  A child that fails, answers nothing or
outlives its timeout raises :class:`ChildError` (:class:`ChildTimeout`) with the end of
its stderr.

This module imports neither JAX nor BrainPy.
"""
from __future__ import annotations

import fnmatch
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["MARK", "ChildError", "ChildTimeout", "Child", "clean_env", "start", "run",
           "wait_all", "answer", "read_answer", "REPO"]

MARK = "@@shardbook-answer@@ "   # the line a child answers with starts with this
REPO = Path(__file__).resolve().parent.parent   # the folder that holds shardbook/
DROPPED = ("JAX_*", "XLA_*", "BOOK_NUM_DEVICES")
DEVICE_COUNT = "--xla_force_host_platform_device_count"
TAIL_LINES = 30


class ChildError(RuntimeError):
    """A child process failed, answered nothing, or ran out of time."""

    def __init__(self, message: str, returncode: int | None = None, stderr: str = ""):
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class ChildTimeout(ChildError, TimeoutError):
    """A child process did not finish within its timeout; it was killed."""


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.strip().splitlines()[-lines:])


def clean_env(extra: dict | None = None, keep=(), paths=(), base=None) -> dict:
    """The environment for a child: ``base`` (default ``os.environ``) less the names
    matching ``JAX_*``, ``XLA_*`` or ``BOOK_NUM_DEVICES`` (a child sets up its own
    devices), except those matching a pattern in ``keep`` (``"XLA_FLAGS"`` keeps the
    flags, less a forced device count, which would win).  ``PYTHONPATH``: ``paths``,
    the repository, then ``base``'s.  ``PYTHONUNBUFFERED=1``, so a dying child's output
    is in its log.  ``extra`` is set last, its values as strings.
    """
    base = dict(os.environ if base is None else base)

    def kept(name):
        return any(fnmatch.fnmatchcase(name, p) for p in keep)

    env = {k: v for k, v in base.items()
           if kept(k) or not any(fnmatch.fnmatchcase(k, p) for p in DROPPED)}
    if "XLA_FLAGS" in env:
        flags = [f for f in env["XLA_FLAGS"].split() if not f.startswith(DEVICE_COUNT)]
        env["XLA_FLAGS"] = " ".join(flags)
    pythonpath = [str(p) for p in paths] + [str(REPO)]
    if base.get("PYTHONPATH"):
        pythonpath.append(base["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def answer(obj, stream=None) -> None:
    """The child's side: print ``obj`` as the one marked JSON line, and flush."""
    stream = stream or sys.stdout
    stream.write(MARK + json.dumps(obj) + "\n")   # one write: lines never interleave
    stream.flush()


def read_answer(stdout: str):
    """The JSON of the last marked line of ``stdout``; ``LookupError`` if none."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        raise LookupError("no answer line")
    return json.loads(lines[-1][len(MARK):])


class Child:
    """A child process started by :func:`start`; :meth:`result` waits for its answer."""

    def __init__(self, argv: list[str], env: dict, input: str | None = None,
                 timeout: float | None = None, cwd=None, name: str | None = None):
        self.argv, self.name = argv, name or " ".join(Path(a).name for a in argv[1:3])
        self.timeout = timeout
        self._out = tempfile.TemporaryFile("w+")
        self._err = tempfile.TemporaryFile("w+")
        stdin = None
        if input is not None:
            stdin = tempfile.TemporaryFile("w+")
            stdin.write(input)
            stdin.seek(0)
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        try:
            self.proc = subprocess.Popen(
                argv, stdin=stdin if stdin else subprocess.DEVNULL, stdout=self._out,
                stderr=self._err, env=env, cwd=cwd, text=True, start_new_session=True)
        finally:
            if stdin:
                stdin.close()
        self._answer = self._error = None
        self._done = False
        self._kept = None   # (stdout, stderr), read at its exit, before the files close

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        """Kill the child and everything in its session, and reap it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def stdout(self) -> str:
        """What the child wrote to stdout: so far, or all of it once it has exited."""
        if self._kept is not None:
            return self._kept[0]
        self._out.seek(0)
        return self._out.read()

    def stderr(self) -> str:
        """What the child wrote to stderr: so far, or all of it once it has exited."""
        if self._kept is not None:
            return self._kept[1]
        self._err.seek(0)
        return self._err.read()

    def _finish(self):
        """Read the answer of a child that has exited (once)."""
        if self._done:
            return
        self._done = True
        rc = self.proc.returncode
        self._kept = out, err = self.stdout(), self.stderr()   # a failed child's too
        self._out.close()
        self._err.close()
        if rc:
            self._error = ChildError(f"{self.name} failed (exit code {rc}); end of its "
                                     f"stderr:\n{tail(err)}", rc, err)
        else:
            try:
                self._answer = read_answer(out)
            except (LookupError, ValueError) as e:
                self._error = ChildError(f"{self.name} exited without an answer ({e}); "
                                         f"end of its stderr:\n{tail(err)}", rc, err)

    def failed(self) -> bool:
        """True once the child has exited with an error (it does not wait)."""
        return self.proc.poll() not in (None, 0)

    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline \
            and self.proc.poll() is None

    def timeout_error(self) -> ChildTimeout:
        """Kill the child; the error that says it ran out of time."""
        self.kill()
        err = self.stderr()
        self._done = True
        self._error = ChildTimeout(
            f"{self.name} did not finish within {self.timeout:g} s and was killed; "
            f"end of its stderr:\n{tail(err)}", None, err)
        return self._error

    def result(self):
        """Wait (until the deadline) and return the child's answer, or raise."""
        if not self._done:
            left = None
            if self.deadline is not None:
                left = max(0.0, self.deadline - time.monotonic())
            try:
                self.proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                raise self.timeout_error() from None
            self._finish()
        if self._error is not None:
            raise self._error
        return self._answer


def _argv(target: str, args) -> list[str]:
    """``python -m module`` for a dotted name, ``python script`` for a path."""
    args = [str(a) for a in args]
    if target.endswith(".py") or os.sep in target:
        return [sys.executable, str(target), *args]
    return [sys.executable, "-m", target, *args]


def start(target: str, *args, env: dict | None = None, input: str | None = None,
          timeout: float | None = None, cwd=None, name: str | None = None) -> Child:
    """Start ``target`` (a module name, or a script path) with ``args``, and return at
    once.  ``env`` default: :func:`clean_env`.  ``timeout`` counts from now."""
    return Child(_argv(target, args), clean_env() if env is None else env, input=input,
                 timeout=timeout, cwd=cwd, name=name)


def run(target: str, *args, **kwargs):
    """:func:`start` and wait: the child's answer."""
    return start(target, *args, **kwargs).result()


def wait_all(children: list[Child], timeout: float | None = None, poll_s: float = 0.05):
    """Wait for every child; their answers, in order.  The first failure or timeout (a
    child's own, or the common ``timeout`` from now) kills all of them and raises."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while any(c.poll() is None for c in children):
            for c in children:
                if c.failed():
                    c.result()            # raises its ChildError
                if c.timed_out():
                    raise c.timeout_error()
            if deadline is not None and time.monotonic() > deadline:
                for c in children:
                    c.kill()
                raise ChildTimeout(f"the {len(children)} processes did not finish "
                                   f"within {timeout:g} s; all were killed")
            time.sleep(poll_s)
        return [c.result() for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
