"""Small, tested helpers shared by the chapters of *Sharding Brain Dynamics*.

Import order matters: ``setup_devices`` must run before ``import brainpy``, so this
package imports neither JAX nor BrainPy when it is imported.

Modules:
  devices   set up real or simulated devices, and check it took effect
  shards    shard tables, bytes per device, tiling and sharding checks
  hlo       the one reader of compiled programs (Program): collectives, loops, memory
  expect    what each compiler is expected to do with the book's steps (one table)
  memory    compiled memory analysis and predicted-versus-measured ledgers
  plotting  ownership and bytes-per-device plots
  rnn       the RNN of BrainPy issue #641: model, pure steps, variants, bytes
            (chapters 2, 3, 5)
  coba      the COBA-HH network, its memory model and time model (chapter 4)
  multiprocess  the jax.distributed worker and launcher of chapter 5a
  verify    equivalence checks with stated tolerances, and the log of their margins
"""
from pathlib import Path

from .devices import DeviceSetupError, divisible_size, mesh_shape_2d, setup_devices

__all__ = ["setup_devices", "DeviceSetupError", "data_dir", "divisible_size",
           "mesh_shape_2d"]
__version__ = "1.2.0.dev0"


def data_dir() -> Path:
    """The measured data the pages read: the copy a hosted notebook's wheel carries
    (``shardbook/_data``, pyproject.toml), else ``book/data`` of this checkout."""
    package = Path(__file__).resolve().parent
    wheel = package / "_data"
    return wheel if wheel.is_dir() else package.parent / "book" / "data"
