"""Plain imports of public names: notebooks, tests, scripts and recipes reach
``shardbook`` only through names a reader can follow to their definition.

* ``from shardbook import book`` (device setup, chapter sizes, source regions), or
  ``from shardbook.book import NAME`` with NAME in ``book.__all__``;
* ``from shardbook import MODULE`` with MODULE one of the helper modules of
  ``book.MODULES``, or ``from shardbook.MODULE import NAME`` (also from a module inside
  one, such as ``shardbook.coba.regimes``) with NAME in that module's ``__all__``;
* every attribute read from such a module, or from a module inside it
  (``coba.ledger.event_bytes``), is in that module's ``__all__``; nothing is read from
  ``book`` that ``book.__all__`` does not name.

No module of ``shardbook`` answers a missing name with ``__getattr__``.  The package's
own modules import each other freely; the child processes started with
``python -m shardbook.X`` are entry points, not imports.
"""

import ast
import importlib
import json
from pathlib import Path

import pytest

from shardbook import book

ROOT = Path(__file__).resolve().parents[1]


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
    return out


def _public(module) -> set:
    return set(getattr(module, "__all__", ()))


def _helper(dotted: str):
    """The helper module ``shardbook.X[.Y]`` names (X in ``book.MODULES``), or None."""
    parts = dotted.split(".")
    if parts[0] != "shardbook" or len(parts) < 2 or parts[1] not in book.MODULES:
        return None
    try:
        return importlib.import_module(dotted)
    except ImportError:
        return None


def surface_violations(name: str, text: str) -> list[str]:
    """What in ``text`` reaches shardbook other than by a public name."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        return [f"{name}: cannot parse: {e}"]
    bad, bound = [], {}  # local name -> the shardbook module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "shardbook" or alias.name.startswith("shardbook."):
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
                elif node.module == "shardbook" and alias.name in book.MODULES:
                    bound[local] = importlib.import_module(f"shardbook.{alias.name}")
                elif node.module == "shardbook.book" and alias.name in book.__all__:
                    pass
                elif _helper(node.module) is not None and alias.name in _public(
                    _helper(node.module)
                ):
                    value = getattr(_helper(node.module), alias.name)
                    if isinstance(value, type(book)):
                        bound[local] = value
                else:
                    bad.append(
                        f"{name}:{node.lineno}: from {node.module} import {alias.name}"
                    )
    def module_of(node):
        """The shardbook module an expression stands for (``coba``, ``coba.ledger``),
        or None."""
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            outer = module_of(node.value)
            if outer is not None and node.attr in _public(outer):
                value = getattr(outer, node.attr, None)
                return value if isinstance(value, type(book)) else None
        return None

    for node in ast.walk(tree):
        module = module_of(node.value) if isinstance(node, ast.Attribute) else None
        if module is not None and node.attr not in _public(module) and not (
                node.attr.startswith("__")):
            bad.append(
                f"{name}:{node.lineno}: {ast.unparse(node)} is not in "
                f"{module.__name__}.__all__"
            )
    return bad


def test_every_helper_module_declares_its_public_names():
    for name in book.MODULES:
        value = importlib.import_module(f"shardbook.{name}")
        assert _public(value), f"shardbook.{name} has no __all__"
        for public in _public(value):
            assert hasattr(value, public), f"{name}.__all__ names missing {public!r}"


def test_no_module_answers_a_missing_name():
    """No ``__getattr__`` at module level anywhere in shardbook/: every name a page
    uses is defined where an editor finds it."""
    found = []
    for path in sorted((ROOT / "shardbook").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_everything_is_reached_by_a_public_name():
    bad = []
    for name, text in _sources():
        bad += surface_violations(name, text)
    assert not bad, "reaches shardbook other than by a public name:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "planted, found",
    [
        ("from shardbook import gputarget_steps", "import gputarget_steps"),
        ("import shardbook.coba", "import shardbook.coba"),
        ("from shardbook import coba\ncoba._leaf(1)", "coba._leaf"),
        ("from shardbook import book\nbook.nothing", "book.nothing"),
        ("from shardbook import shards\nshards.as_jax_private(1)", "as_jax_priv"),
        ("from shardbook.hlo import _parse", "from shardbook.hlo import _parse"),
        ("from shardbook.coba import regimes\nregimes._x", "regimes._x"),
        ("from shardbook import coba\ncoba.ledger.secret", "coba.ledger.secret"),
    ],
)
def test_the_surface_test_catches_a_planted_reach(planted, found):
    bad = surface_violations("planted", planted)
    assert bad and found in bad[0], bad


def _lab_imports(path: Path, code: str, scripts: set) -> list[str]:
    """The imports of lab/ scripts in one file's code."""
    found = []
    for node in ast.walk(ast.parse(code)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom)
                 else [])
        found += [f"{path.name}: {n}" for n in names
                  if n.split(".")[0] in scripts | {"lab"}]
    return found


def test_no_page_nor_ci_script_imports_lab():
    """lab/ writes book/data/; the pages and ci/ read the data, never the scripts (ci/
    runs on CI's clone, lab/ by hand or on a GPU)."""
    scripts = {p.stem for p in (ROOT / "lab").glob("*.py")}
    found = []
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        found += _lab_imports(path, _notebook_code(path), scripts)
    for path in sorted((ROOT / "ci").glob("*.py")):
        found += _lab_imports(path, path.read_text(), scripts)
    assert not found, found
    assert scripts, "lab/ has no scripts"
    planted = _lab_imports(ROOT / "ci" / "x.py", "import coba_cli\n", scripts)
    assert planted == ["x.py: coba_cli"]
