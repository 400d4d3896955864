"""The doorway: the one module of ``shardbook`` that notebooks and tests import.

::

    from shardbook import book
    info = book.setup_devices()          # first, before JAX or BrainPy starts
    cfg = book.config("ch3")             # the chapter's sizes for these devices
    book.show("rnn.state")               # a named region of the package's source
    prog = book.Program(compiled)        # the one reader of compiled programs
    print(book.expect.check("ch3.hidden", prog, **cfg.asdict()))  # what the compiler
                                         # is expected to do, from one table

Everything a chapter may use is listed in ``__all__``: the names above, and the
helper modules (``book.shards``, ``book.verify``, ``book.coba``, ...), of which only the
names in each module's own ``__all__`` are public.  ``tests/test_surface.py`` checks
that notebooks, tests, scripts and recipes reach ``shardbook`` through nothing else.

Importing this module starts neither JAX nor BrainPy: the helper modules load on first
use, so the device-setup cell can import it before the backend starts.
"""
from __future__ import annotations

import importlib

from . import __version__  # noqa: F401  (book.__version__: the package's version)
from .config import CHAPTERS, Config, config
from .devices import (
    DeviceInfo,
    DeviceSetupError,
    divisible_size,
    lesson_devices,
    mesh_shape_2d,
    setup_devices,
    speed_devices,
)
from .regions import RegionError, region, regions, show

devices = lesson_devices   # the devices the lessons run on

# Loaded on first use (they import JAX, and some import BrainPy).
_MODULES = {
    "shards": "shards",            # shard tables, bytes per device, layout checks
    "hlo": "hlo",                  # the reader of compiled programs (Program)
    "expect": "expect",            # the table of what each compiler does
    "memory": "memory",            # memory analysis and ledgers
    "verify": "verify",            # equivalence checks with stated tolerances
    "plotting": "plotting",        # ownership and bytes-per-device plots
    "provenance": "provenance",    # where a measurement was made, for data files
    "compiles": "compiles",        # counting compilations (jax.monitoring)
    "rnn": "rnn",                  # the RNN of the discussion, its steps and bytes
    "train_memory": "train_memory",  # the RNN's training memory model
    "coba": "coba",                # the COBA-HH network of chapter 4
    "gputarget": "gputarget",      # compiling for a GPU without a GPU
    "multiprocess": "multiprocess",  # the jax.distributed worker and launcher
    "child": "child",              # one child-process protocol: clean env, JSON back
    "cluster": "cluster",          # cluster failures reproduced on one machine (5c)
    "private": "private",          # every private JAX/brainstate/Orbax touch point
    "hardware": "hardware",        # cited GPU figures (H200, H100) for the cost models
    "gpudata": "gpudata",          # the real-GPU data file of lab/gpu_check, validated
    "traces": "traces",            # a jax.profiler trace written and read back (ch. 7)
    "explorer": "explorer",        # the interactive sharding explorer (ch. 1)
}
_NAMES = {
    "Program": ("hlo", "Program"),
    "count_compiles": ("compiles", "count_compiles"),
    "gpu_data": ("gpudata", "gpu_data"),     # a GPU run's figures, or None
    "gpu_note": ("gpudata", "gpu_note"),     # "measured on ..." or "no real-GPU ..."
}

__all__ = [
    "setup_devices", "DeviceInfo", "DeviceSetupError", "devices", "speed_devices",
    "divisible_size", "mesh_shape_2d", "config", "Config", "CHAPTERS",
    "region", "regions", "show", "RegionError",
]
__all__ += [*_MODULES, *_NAMES]
__all__.sort()


def __getattr__(name: str):
    if name in _MODULES:
        module = importlib.import_module(f"shardbook.{_MODULES[name]}")
        globals()[name] = module
        return module
    if name in _NAMES:
        mod, attr = _NAMES[name]
        value = getattr(importlib.import_module(f"shardbook.{mod}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"shardbook.book has no public name {name!r}; "
                         f"the doorway offers: {', '.join(__all__)}")


def __dir__():
    return list(__all__)
