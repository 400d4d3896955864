"""Every test in this folder runs with 4 simulated CPU devices.

JAX fixes the device count when its backend starts, so it is set here, when pytest
loads this file and before any test module imports JAX or BrainPy.
"""

import os
import sys
from pathlib import Path

# ci/ and lab/ on the path: tests list and read the notebooks through ci/notebooks.py,
# and import lab/'s measurement scripts
for _folder in ("lab", "ci"):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / _folder))
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["BOOK_NUM_DEVICES"] = "4"

from shardbook import book  # noqa: E402

book.setup_devices(verbose=False)
