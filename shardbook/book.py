"""What every page imports first: device setup, chapter sizes, source regions.

::

    from shardbook import book
    info = book.setup_devices()          # first, before JAX or BrainPy starts
    cfg = book.config("ch3")             # the chapter's sizes for these devices
    book.show("rnn.state")               # a named region of the package's source

The helper modules are plain imports, made after the device setup (most of them
import BrainPy, which starts JAX's backend)::

    from shardbook import shards, verify  # shard tables; equivalence checks
    from shardbook.hlo import Program     # the one reader of compiled programs

Each helper module lists its public names in its own ``__all__``;
``tests/test_surface.py`` checks that notebooks, tests, scripts and recipes use
nothing else.  Importing this module starts neither JAX nor BrainPy, so the
device-setup cell can import it before the backend starts.
"""
from __future__ import annotations

from . import (
    __version__,  # noqa: F401  (book.__version__: the package's version)
    data_dir,
)
from .config import CHAPTERS, Config, config
from .devices import (
    DeviceInfo,
    DeviceSetupError,
    cpu_devices,
    divisible_size,
    lesson_devices,
    mesh_shape_2d,
    setup_devices,
    speed_devices,
)
from .regions import RegionError, region, regions, show

devices = lesson_devices   # the devices the lessons run on

# The helper modules a page may import (``from shardbook import NAME``), each with
# what it is for.  Listed, not loaded: they start JAX and BrainPy when imported.
MODULES = {
    "shards": "shard tables, bytes per device, layout checks",
    "hlo": "the reader of compiled programs (Program)",
    "expect": "the table of what each compiler does",
    "memory": "memory analysis and ledgers",
    "verify": "equivalence checks with stated tolerances",
    "plotting": "ownership and bytes-per-device plots",
    "compiles": "counting compilations (jax.monitoring)",
    "rnn": "the RNN of the discussion, its steps and bytes",
    "train_memory": "the RNN's training memory model",
    "coba": "the COBA-HH network of chapter 4",
    "gputarget": "compiling for a GPU without a GPU, and the stored GPU programs",
    "multiprocess": "the jax.distributed worker and launcher",
    "child": "one child-process protocol: clean environment, JSON back",
    "cluster": "cluster failures reproduced on one machine (5c)",
    "private": "every private JAX/brainstate/Orbax touch point",
    "hardware": "cited GPU figures (H200, H100) for the cost models",
    "gpudata": "the real-GPU data files of lab/gpu_check, read",
    "traces": "a jax.profiler trace written and read back (ch. 7)",
    "explorer": "the interactive sharding explorer (ch. 1)",
}

__all__ = [
    "CHAPTERS", "Config", "DeviceInfo", "DeviceSetupError", "MODULES", "RegionError",
    "config", "cpu_devices", "data_dir", "devices", "divisible_size", "mesh_shape_2d",
    "region", "regions", "setup_devices", "show", "speed_devices",
]
