"""The real-GPU data file that ``lab/gpu_check`` writes, and the book's one reader.

A GPU figure exists only in a file a GPU run wrote: ``book/data/gpu_<device>.json``
(``gpu_h200.json`` for an H200).  Beside it, ``book/data/gpu_target_h200.json`` holds
what a CPU run predicted for the same steps by compiling for a 1-device H200 target
without a GPU (``lab/gpu_check --predict``).

* :func:`load` returns a device's file, or ``None`` when no GPU run exists (a dry
  run's file is never loaded from ``book/data/``); ``lab/gpu_schema.py`` validates
  the files when they are written and tested;
* :func:`note` renders the one line the chapters print: where the figures were
  measured, or that no real-GPU measurement exists yet.

This module imports neither JAX nor BrainPy.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import data_dir

__all__ = ["SCHEMA", "PREDICTION_SCHEMA", "DATA_DIR", "GpuDataError", "device_slug",
           "path_for", "load", "load_prediction", "note", "gpu_data", "gpu_note",
           "compile_lines", "coba_rows", "mismatch_text",
           "allocator_limit", "compile_verdict"]

SCHEMA = "shardbook.gpu-check/1"
PREDICTION_SCHEMA = "shardbook.gpu-target-prediction/1"
DATA_DIR = data_dir()
NO_DATA = "no real-GPU measurement exists yet: run lab/gpu_check on a GPU"

class GpuDataError(ValueError):
    """A GPU data file is malformed, or claims what its run could not have measured."""


def device_slug(device_kind: str) -> str:
    """``'NVIDIA H200'`` -> ``'h200'``; ``'cpu'`` -> ``'cpu'``: the file name's part."""
    slug = re.sub(r"^nvidia\s+", "", device_kind.strip().lower())
    return re.sub(r"[^a-z0-9]+", "_", slug).strip("_") or "unknown"


def path_for(device: str = "h200", root=None) -> Path:
    """``book/data/gpu_<device>.json``."""
    folder = Path(root if root is not None else DATA_DIR)
    return folder / f"gpu_{device_slug(device)}.json"


def load(device: str = "h200", root=None) -> dict | None:
    """The data of the GPU run on ``device``, or ``None`` if there is none.

    A dry run's file found in ``book/data/`` raises: it holds CPU figures.  (The file
    was validated when ``lab/gpu_check`` wrote it, and ``tests/test_gpu_check.py``
    validates the committed ones: ``lab/gpu_schema.py``.)"""
    path = path_for(device, root)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("dry_run") is not False:   # a dry run's file holds CPU figures
        raise GpuDataError(f"{path.name}: dry_run={data.get('dry_run')!r}, not a real "
                           "GPU run's file; it does not belong in book/data/")
    return data


def load_prediction(target: str = "h200", root=None) -> dict | None:
    """The GPU-target prediction for ``target``, or ``None``."""
    path = Path(root if root is not None else DATA_DIR) / f"gpu_target_{target}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())


def note(data: dict | None) -> str:
    """One line: where the figures were measured, or that none exist yet."""
    if data is None:
        return NO_DATA
    prov = data["provenance"]
    commit = str(prov.get("commit") or "unknown commit")[:12]
    dirty = ", tree not clean" if prov.get("dirty") else ""   # git status, as recorded
    return (f"measured on {prov['device_count']} x {prov['device_kind']} "
            f"({prov['date'][:10]}, commit {commit}{dirty})")


def gpu_data(device: str = "h200") -> dict | None:
    """``gpu_data()``: the GPU run's data for ``device`` from ``book/data/``, or
    ``None`` when no GPU run has written one."""
    return load(device)


def gpu_note(device: str = "h200") -> str:
    """``gpu_note()``: :func:`note` of :func:`gpu_data`."""
    return note(load(device))


def compile_lines(data: dict) -> list[str]:
    """Chapter 6's 1-device steps: bytes compiled on the GPU beside the prediction."""
    out = [f"{'step':<12}{'item':<13}{'predicted':>16}{'on the GPU':>16}{'diff':>14}"]
    for row in data["compile"]:
        for item in ("collectives", "arguments", "outputs", "temporaries"):
            p, m = row["predicted"][item], row["measured"][item]
            out.append(f"{row['name']:<12}{item:<13}{p:>16,}{m:>16,}{m - p:>+14,}")
    return out


def coba_rows(data: dict) -> list[tuple]:
    """The GPU run's COBA-HH timings: (neurons, delivery, us per step, events per step,
    compile seconds), one row per timed size and delivery."""
    return [(r["neurons"], r["conn"], r["seconds_per_step"] * 1e6, r["events_per_step"],
             r["compile_s"]) for r in data["timing"].get("coba") or []
            if "seconds_per_step" in r]


def mismatch_text(data: dict) -> str:
    """The versions of the GPU run that differ from the book's pins, or ``'none'``;
    with the JAX CUDA plugin the run used, if any (the book's GPU pins name CUDA
    12's, ``ci/requirements-gpu.txt``)."""
    prov = data["provenance"]
    said = [f"{k} {v['found']} (pinned {v['pinned']})"
            for k, v in prov["mismatch"].items()]
    said += [f"{k} {v} (the book's GPU pins: CUDA 12's)"
             for k, v in sorted(prov.get("versions", {}).items())
             if k.startswith("jax-cuda") and k.endswith("-plugin") and v
             and not k.startswith("jax-cuda12")]
    return ", ".join(said) or "none"


def allocator_limit(data: dict) -> int | None:
    """The GPU allocator's cap that the run read (``memory_stats()['bytes_limit']``,
    the smallest over its memory rows), or ``None`` if no row recorded one."""
    limits = [r["bytes_limit"] for r in data.get("memory") or []
              if isinstance(r.get("bytes_limit"), (int, float))
              and not isinstance(r.get("bytes_limit"), bool)]
    return int(min(limits)) if limits else None


def compile_verdict(data: dict) -> tuple[bool, str]:
    """Whether every step compiled on the GPU has the predicted collectives, argument
    and output bytes (``True``: equal to the byte), and the lines that say so, with
    the largest ratio of the temporaries (which a device autotunes): two lines."""
    rows = data["compile"]
    if not rows:
        raise GpuDataError("the GPU run compiled no step: nothing to compare")
    exact = all(r["measured"][k] == r["predicted"][k] for r in rows
                for k in ("collectives", "arguments", "outputs"))
    ratio, name = max((r["measured"]["temporaries"]
                       / max(r["predicted"]["temporaries"], 1), r["name"])
                      for r in rows)
    said = ("equal to the byte" if exact else "NOT equal to the prediction")
    return exact, (f"collectives, arguments and outputs of {len(rows)} steps: {said}\n"
                   f"temporaries: up to {ratio:.1f} x the prediction ({name})")
