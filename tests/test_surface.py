"""One doorway: notebooks, tests, scripts and recipes reach ``shardbook`` only through
``shardbook.book`` and the names it declares public.

* ``shardbook`` is imported only as ``from shardbook import book`` (or
  ``from shardbook.book import NAME`` with NAME in ``book.__all__``, or, as a plain
  import a reader can follow, ``from shardbook.MODULE import NAME`` where MODULE is one
  of ``book``'s modules and NAME is in that module's ``__all__``);
* every attribute read from ``book`` is in ``book.__all__``, and every attribute read
  from one of its helper modules is in that module's ``__all__``.

The package's own modules import each other freely; the child processes started with
``python -m shardbook.X`` are entry points, not imports.
"""

import ast
import importlib
import json
from pathlib import Path

import pytest

from shardbook import book

ROOT = Path(__file__).resolve().parents[1]
# Files not yet moved onto the doorway (issue 18); emptied when they are.
NOT_YET_MIGRATED: set[str] = set()  # every file is on the doorway


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return "\n".join(
        "" if ln.lstrip().startswith(("%", "!")) else ln for ln in code.splitlines()
    )


def _sources():
    out = []
    for folder in ("tests", "ci", "lab", "recipes"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            out.append((str(path.relative_to(ROOT)), path.read_text()))
    for path in sorted([*(ROOT / "ci").iterdir(), *(ROOT / "lab").iterdir()]):
        if (
            path.is_file()
            and not path.suffix
            and path.read_text(errors="ignore").startswith("#!/usr/bin/env python")
        ):
            out.append((str(path.relative_to(ROOT)), path.read_text()))
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        out.append((str(path.relative_to(ROOT)), _notebook_code(path)))
    return [(name, text) for name, text in out if name not in NOT_YET_MIGRATED]


def _public(module) -> set:
    return set(getattr(module, "__all__", ()))


def _doorway_module(dotted: str):
    """The module of ``book.__all__`` that ``shardbook.X`` names, or None."""
    head, _, rest = dotted.partition(".")
    if head != "shardbook" or not rest or "." in rest or rest not in book.__all__:
        return None
    value = getattr(book, rest)
    return value if isinstance(value, type(book)) else None


def surface_violations(name: str, text: str) -> list[str]:
    """What in ``text`` reaches shardbook other than through the doorway."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        return [f"{name}: cannot parse: {e}"]
    bad, bound = [], {}  # local name -> the shardbook module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "shardbook" or alias.name.startswith("shardbook."):
                    if alias.name != "shardbook.book":
                        bad.append(f"{name}:{node.lineno}: import {alias.name}")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and (node.module == "shardbook" or node.module.startswith("shardbook."))
        ):
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "shardbook" and alias.name == "book":
                    bound[local] = book
                elif node.module == "shardbook.book" and alias.name in book.__all__:
                    value = getattr(book, alias.name)
                    if isinstance(value, type(book)):
                        bound[local] = value
                elif _doorway_module(node.module) is not None and alias.name in _public(
                    _doorway_module(node.module)
                ):
                    value = getattr(_doorway_module(node.module), alias.name)
                    if isinstance(value, type(book)):
                        bound[local] = value
                else:
                    bad.append(
                        f"{name}:{node.lineno}: from {node.module} import {alias.name}"
                    )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
        ):
            module = bound[node.value.id]
            if node.attr not in _public(module) and not node.attr.startswith("__"):
                bad.append(
                    f"{name}:{node.lineno}: {node.value.id}.{node.attr} is not in "
                    f"{module.__name__}.__all__"
                )
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and bound.get(node.value.value.id) is book
            and node.value.attr in book.__all__
        ):
            value = getattr(book, node.value.attr)
            if isinstance(value, type(book)) and node.attr not in _public(value):
                bad.append(
                    f"{name}:{node.lineno}: book.{node.value.attr}.{node.attr} is "
                    f"not in {value.__name__}.__all__"
                )
    return bad


def test_every_helper_module_declares_its_public_names():
    for name in book.__all__:
        value = getattr(book, name)
        if isinstance(value, type(book)):
            assert _public(value), f"shardbook.{name} has no __all__"
            for public in _public(value):
                assert hasattr(value, public), (
                    f"{name}.__all__ names missing {public!r}"
                )


def test_nothing_reaches_around_the_doorway():
    bad = []
    for name, text in _sources():
        bad += surface_violations(name, text)
    assert not bad, "reaches shardbook around shardbook.book:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "planted, found",
    [
        ("from shardbook import hlo", "from shardbook import hlo"),
        ("import shardbook.coba", "import shardbook.coba"),
        ("from shardbook import book\nbook.coba._leaf(1)", "book.coba._leaf"),
        ("from shardbook import book\nbook.nothing", "book.nothing"),
        (
            "from shardbook.book import shards\nshards.as_jax_private(1)",
            "shards.as_jax_private",
        ),
    ],
)
def test_the_surface_test_catches_a_planted_reach(planted, found):
    bad = surface_violations("planted", planted)
    assert bad and found in bad[0], bad


def test_a_module_listed_public_can_be_imported():
    for name in (
        "shards",
        "verify",
        "memory",
        "plotting",
        "provenance",
        "compiles",
        "private",
        "expect",
    ):
        importlib.import_module(f"shardbook.{name}")
