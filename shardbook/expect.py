"""What each compiler is expected to do with the book's steps: one table, one check.

XLA's CPU and GPU compilers run different passes, so the same sharded step compiles to
different collectives and temporaries on the two (chapter 6).  Every compiler-dependent
claim of the book is one entry of ``expectations.toml``, keyed by the step's name, the
compiler (``cpu`` or ``gpu``) and the JAX version it was measured with.  A notebook
never branches on the platform; it asks::

    print(book.expect.check("ch2.dp.step", book.Program(compiled), grad_bytes=4488))

which compares the program with the entry for the program's own compiler and prints
one line saying what was checked, or raises ``AssertionError`` with expected and found.

``$BOOK_EXPECTATIONS`` names another table file (``tests/`` plants a changed
expectation with it and shows that the chapter relying on it fails).

This module imports neither JAX nor BrainPy at import time.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path

__all__ = ["ExpectationMissing", "table", "entry", "parameters", "check", "TABLE"]

TABLE = Path(__file__).resolve().parent / "expectations.toml"
ENV_VAR = "BOOK_EXPECTATIONS"


class ExpectationMissing(KeyError):
    """No entry for this step, compiler and JAX version."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_CACHE: dict = {}


def table(path=None) -> dict:
    """The whole table (``$BOOK_EXPECTATIONS`` or the package's own file)."""
    path = Path(path or os.environ.get(ENV_VAR) or TABLE)
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _CACHE:
        with open(path, "rb") as f:
            _CACHE[key] = tomllib.load(f)
    return _CACHE[key]


def _jax_version() -> str:
    from importlib.metadata import version

    return version("jax")


def entry(step: str, compiler: str, jax_version: str | None = None) -> dict:
    """The entry for ``step`` on ``compiler`` ('cpu' or 'gpu') at this JAX version."""
    t = table()
    jax_version = jax_version or _jax_version()
    if step not in t:
        raise ExpectationMissing(f"no expectation named {step!r} in {TABLE.name}; "
                                 f"known: {', '.join(k for k in t if k != 'meta')}")
    if compiler not in t[step]:
        raise ExpectationMissing(f"{step!r} says nothing about the {compiler} compiler")
    e = t[step][compiler]
    measured = str(e.get("jax", t.get("meta", {}).get("jax", "")))
    if not jax_version.startswith(measured):
        raise ExpectationMissing(
            f"{step!r} on {compiler} was measured with JAX {measured}; this is JAX "
            f"{jax_version}. Compile the step, compare, and add an entry for it.")
    return e


def parameters(step: str, compiler: str) -> dict:
    """The numbers of a ``kind = "parameters"`` entry (a memory model's constants)."""
    return {k: v for k, v in entry(step, compiler).items()
            if k not in ("why", "anchor", "jax", "kind")}


def check(step: str, program, **params) -> str:
    """Compare ``program`` (a :class:`shardbook.hlo.Program`) with the table; see module."""
    raise NotImplementedError("shardbook.expect.check is being written (issue 18)")
