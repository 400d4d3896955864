"""pytest's hooks for every run in this repository (tests/conftest.py adds the tests').

Each notebook's kernel starts with ``BOOK_NOTEBOOK`` naming its notebook, so that the
gap log of the equivalence checks (``BOOK_GAP_LOG``, ``shardbook.verify``) says which
page each row came from, whichever pytest-xdist worker ran it.  Each cell's JUnit
record names its notebook too (``ci/junit.py`` reads it).
"""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before nbval starts a notebook's kernel (the setup of its first cell)."""
    path = Path(str(item.path)).resolve()
    if path.suffix == ".ipynb":
        name = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
        os.environ["BOOK_NOTEBOOK"] = name
        item.user_properties.append(("notebook", name))
