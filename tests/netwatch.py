"""Watch a launch's listening sockets while it runs (test_recipes.py, test_slurm.py).

A multi-process launch must listen on loopback only.  :func:`watch_listeners` polls
``/proc`` until the launcher exits, and collects every listening TCP socket of the
processes it is given; :func:`check_loopback_only` then asserts that the coordinator
was among them (so the check is not vacuous) and that none listened elsewhere.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import time


def address(hex_address: str) -> str:
    """An address of /proc/net/tcp{,6} ('0100007F:1F90') as text ('127.0.0.1')."""
    host = hex_address.split(":")[0]
    raw = b"".join(bytes.fromhex(host[i : i + 8])[::-1] for i in range(0, len(host), 8))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def is_loopback(text: str) -> bool:
    ip = ipaddress.ip_address(text)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def session_pids(session: int) -> list[int]:
    """The processes of a session (a launcher started with start_new_session=True)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session:  # the session id
                pids.append(int(d))
    return pids


def listeners_of(pids) -> set:
    """(pid, address, port) of every listening TCP socket of the processes ``pids``."""
    owner = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    owner[link[8:-1]] = pid
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[3] == "0A" and parts[9] in owner:  # 0A: LISTEN
                    found.add(
                        (
                            owner[parts[9]],
                            address(parts[1]),
                            int(parts[1].split(":")[1], 16),
                        )
                    )
    return found


def watch_listeners(proc, pids, timeout_s: float, what: str) -> set:
    """Until ``proc`` exits: every listening socket of the processes ``pids()`` names.

    ``proc`` was started with ``start_new_session=True``; past ``timeout_s`` seconds its
    whole session is killed and the test fails with ``what`` in the message.
    """
    seen, deadline = set(), time.monotonic() + timeout_s
    try:
        while proc.poll() is None:
            seen |= listeners_of(pids())
            assert time.monotonic() < deadline, f"{what} took over {timeout_s:.0f} s"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return seen


def check_loopback_only(seen: set, port: int) -> None:
    """The coordinator's port was seen listening, and nothing listened off loopback."""
    assert any(p == port for _, _, p in seen), f"the coordinator was never seen: {seen}"
    outside = [s for s in seen if not is_loopback(s[1])]
    assert not outside, f"listening beyond loopback: {outside}"


def coba_args(scale: float, steps: int, raster_dir) -> list[str]:
    """recipes/run_coba.py's arguments for a network of ``scale`` run ``steps``."""
    return ["--scale", str(scale), "--steps", str(steps)] + [
        "--raster-dir",
        str(raster_dir),
    ]


def launch_watched(argv, *, cwd, env, log, timeout_s: float, what: str, pids=None):
    """Start ``argv`` in a session of its own, its output in ``log``, and watch its
    listening sockets until it ends: ``(return code, the sockets seen)``.  ``pids``
    names the processes to watch (default: the launcher's session)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        seen = watch_listeners(
            proc, pids or (lambda: session_pids(proc.pid)), timeout_s, what
        )
    return proc.returncode, seen
