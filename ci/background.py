"""The packages that ``./ci/test`` installs in the background (CI's fresh machine).

A full strict ``./ci/test`` run as root starts one ``apt-get install`` of what is
missing (Debian's chromium for the browser tests, a one-node Slurm for the SLURM recipe
test) in its first second, so that the install overlaps the environment set-up and
the first tests instead of adding its minutes at the end.  It names the file that
will hold the install's exit status in ``BOOK_APT_INSTALL``; whoever needs a package
calls :func:`wait_for_install` first.

  python ci/background.py wait     (ci/browser: wait, then say how the install went)
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ENV_VAR = "BOOK_APT_INSTALL"


def wait_for_install(limit_s: float = 900) -> str:
    """Wait until the background install (if any) has finished, at most ``limit_s``;
    a line saying how it went ('' when none was started)."""
    rc = os.environ.get(ENV_VAR)
    if not rc:
        return ""
    status = Path(rc)
    deadline = time.monotonic() + limit_s
    while not status.exists() and time.monotonic() < deadline:
        time.sleep(1)
    log = status.with_suffix(".log")
    if not status.exists():
        return f"[apt] the background install did not finish in {limit_s:.0f} s ({log})"
    code = status.read_text().strip()
    return f"[apt] the background install ended with exit status {code} ({log})"


if __name__ == "__main__":
    if sys.argv[1:] != ["wait"]:
        raise SystemExit("usage: python ci/background.py wait")
    line = wait_for_install()
    if line:
        print(line)
