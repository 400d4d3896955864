"""Small, tested helpers shared by the chapters of *Sharding Brain Dynamics*.

Import order matters: ``setup_devices`` must run before ``import brainpy``, so this
package imports neither JAX nor BrainPy when it is imported.

Pages start with ``from shardbook import book`` (device setup, chapter sizes, source
regions: ``book.py`` with ``config``, ``devices`` and ``regions``).  The helper modules
a page may import are listed once, with what each is for, in ``book.MODULES``.  The one
other module, ``gputarget_steps``, holds the step builders that GPU-target jobs name.
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
