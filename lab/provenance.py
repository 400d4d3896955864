"""Where and with what a measurement was made, for every data file the book writes.

Real-hardware numbers live in data files under ``book/data/``; each records the device
kind and count, the GPU driver, the library versions actually used (which may differ
from ``requirements.txt`` on a machine with its own JAX build), the date, the command,
and the commit it ran at (marked when ``shardbook/`` or ``lab/`` had edits).
"""
from __future__ import annotations

import datetime
import platform
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["PACKAGES", "version", "gpu_driver", "commit", "provenance"]

ROOT = Path(__file__).resolve().parents[1]

PACKAGES = ("jax", "jaxlib", "brainpy", "brainstate", "brainevent", "numpy")


def version(pkg: str) -> str | None:
    """The installed version of ``pkg``, or None."""
    try:
        from importlib.metadata import version as _v

        return _v(pkg)
    except Exception:
        return None


def gpu_driver() -> str | None:
    """``name, driver, memory`` of each GPU from ``nvidia-smi``, or None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
             "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except Exception:
        return None


def commit() -> str:
    """The short commit of this checkout, plus " (edited)" when ``shardbook/`` or
    ``lab/`` differ from it (the code a measurement ran was not that commit's)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()

    edited = git("status", "--porcelain", "--", "shardbook", "lab")
    return git("rev-parse", "--short", "HEAD") + (" (edited)" if edited else "")


def provenance(command: str | None = None) -> dict:
    """Devices, driver, versions, date and command of a measurement made in this
    process."""
    import jax

    devs = jax.devices()
    return dict(
        device_kind=devs[0].device_kind,
        device_count=len(devs),
        platform=devs[0].platform,
        simulated=devs[0].platform == "cpu",
        driver=gpu_driver(),
        versions={p: version(p) for p in PACKAGES}
        | {"python": platform.python_version()},
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        command=command if command is not None else " ".join(sys.argv),
        commit=commit(),
    )
