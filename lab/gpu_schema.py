"""The structure of the real-GPU data files, checked where they are written and tested.

``lab/gpu_check`` validates a file before it writes it, and ``tests/test_gpu_check.py``
validates the committed ones; the pages read them with ``shardbook.gpudata.load``.
:func:`validate` refuses what would be a fake: a file that claims a GPU but was written
on a CPU, a time without its events per step or its compile time, a phase that is
neither done nor said to have failed.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardbook import gpudata  # noqa: E402

PHASES = ("compile", "memory", "timing", "notebooks")
STATUSES = ("ok", "error", "timeout", "skipped")
_PROVENANCE = ("device_kind", "device_count", "platform", "driver", "versions", "pins",
               "mismatch", "commit", "date", "command")
_MEMORY_ITEMS = ("arguments", "outputs", "temporaries", "total")
_TIMING = ("neurons", "conn", "seconds_per_step", "events_per_step", "compile_s")



def _need(obj, keys, where, missing):
    if not isinstance(obj, dict):
        missing.append(f"{where} (not an object)")
        return
    missing += [f"{where}.{k}" for k in keys if k not in obj]


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def validate(data: dict) -> dict:
    """Check a ``lab/gpu_check`` data file; return it, or raise
    :class:`shardbook.gpudata.GpuDataError` naming every problem.

    Long because: one check per field of the file, in the file's order, so that an error
    names every problem at once.
    """
    if not isinstance(data, dict) or data.get("schema") != gpudata.SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise gpudata.GpuDataError(f"not a {gpudata.SCHEMA} file (schema={got!r})")
    bad: list[str] = []
    _need(data, ("dry_run", "provenance", "phases", "compile", "memory", "timing",
                 "notebooks"), "file", bad)
    prov = data.get("provenance", {})
    _need(prov, _PROVENANCE, "provenance", bad)
    for pkg in ("jax", "jaxlib", "brainpy", "brainstate", "brainevent", "python"):
        if pkg not in prov.get("versions", {}):
            bad.append(f"provenance.versions.{pkg}")
    dry = data.get("dry_run")
    if not isinstance(dry, bool):
        bad.append("dry_run (not true or false)")
    elif not dry and prov.get("platform") != "gpu":
        bad.append(f"a GPU file written on platform {prov.get('platform')!r}: "
                   "a GPU figure exists only where a GPU run wrote it")
    if dry is False:   # a real GPU run says where, when and from what it ran
        for key in ("commit", "driver", "date", "device_kind"):
            if not (isinstance(prov.get(key), str) and prov.get(key)):
                bad.append(f"provenance.{key} is empty: a GPU file names it")
    phases = data.get("phases", {})
    if dry is False and not any(isinstance(ph, dict) and ph.get("status") == "ok"
                                for ph in phases.values()):
        bad.append("no phase finished (status ok): a GPU file without a figure")
    for name in PHASES:
        ph = phases.get(name)
        if not isinstance(ph, dict):
            bad.append(f"phases.{name}")
            continue
        if ph.get("status") not in STATUSES:
            bad.append(f"phases.{name}.status={ph.get('status')!r} (one of {STATUSES})")
        if ph.get("status") in ("error", "timeout") and not ph.get("error"):
            bad.append(f"phases.{name}: {ph.get('status')} without its error")
        for key in ("budget_s", "wall_s"):
            if not _number(ph.get(key)):
                bad.append(f"phases.{name}.{key}")
    for i, row in enumerate(data.get("compile", [])):
        _need(row, ("name", "builder", "kwargs", "predicted", "measured", "diff"),
              f"compile[{i}]", bad)
        for side in ("predicted", "measured"):
            _need(row.get(side, {}), (*_MEMORY_ITEMS, "collectives"),
                  f"compile[{i}].{side}", bad)
    for i, row in enumerate(data.get("memory", [])):
        _need(row, ("model", "size", "analysis", "peak_bytes_in_use",
                    "bytes_in_use_before", "measured", "ratio"), f"memory[{i}]", bad)
        _need(row.get("analysis", {}), _MEMORY_ITEMS, f"memory[{i}].analysis", bad)
    timing = data.get("timing", {})
    _need(timing, ("coba", "coba_10s", "rnn"), "timing", bad)
    for i, row in enumerate(timing.get("coba", []) or []):
        _need(row, _TIMING, f"timing.coba[{i}]", bad)
        if _number(row.get("events_per_step")) and row["events_per_step"] <= 0:
            bad.append(f"timing.coba[{i}]: a silent window (no events) times nothing")
    ten = timing.get("coba_10s")
    if ten is not None:
        _need(ten, ("neurons", "conn", "simulated_s", "run_s", "compile_s",
                    "events_per_step", "published_s"), "timing.coba_10s", bad)
        if _number(ten.get("events_per_step")) and ten["events_per_step"] <= 0:
            bad.append("timing.coba_10s: a silent network (no events) times nothing")
    for i, row in enumerate(timing.get("rnn", []) or []):
        _need(row, ("chapter", "sizes", "seconds_per_step", "compile_s"),
              f"timing.rnn[{i}]", bad)
    for i, row in enumerate(data.get("notebooks", [])):
        _need(row, ("path", "status", "wall_s", "timeout_s"), f"notebooks[{i}]", bad)
    if bad:
        raise gpudata.GpuDataError("GPU data file: " + "; ".join(bad))
    return data


def validate_prediction(data: dict) -> dict:
    """Check the GPU-target prediction file (``lab/gpu_check --predict``)."""
    if not isinstance(data, dict) or data.get("schema") != gpudata.PREDICTION_SCHEMA:
        raise gpudata.GpuDataError(f"not a {gpudata.PREDICTION_SCHEMA} file")
    bad: list[str] = []
    _need(data, ("target", "devices", "provenance", "jobs"), "file", bad)
    _need(data.get("provenance", {}), ("versions", "date", "command", "commit"),
          "provenance", bad)
    for name, job in (data.get("jobs") or {}).items():
        _need(job, ("builder", "kwargs", "collectives", "memory"), f"jobs.{name}", bad)
        _need(job.get("memory", {}), _MEMORY_ITEMS, f"jobs.{name}.memory", bad)
    if bad:
        raise gpudata.GpuDataError("prediction file: " + "; ".join(bad))
    return data
