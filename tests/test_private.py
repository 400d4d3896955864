"""The quarantine: every private JAX/brainstate/Orbax/myst-nb touch point is in
``shardbook/private.py``, version-guarded, and nowhere else in the repository.

* Each guarded function refuses to run on another version than the pinned one, with a
  message that names the pinned version.
* No other file (package, notebooks, tests, ci, recipes, ``_ext``, and the bash
  scripts of ci/, .ci/, recipes/ and binder/) names a private module or attribute of
  those libraries; notebooks and tests use no ``_``-prefixed attribute at all, and the
  Python of ci/, recipes/ and ``_ext`` none but its own (``self._x``).
"""

import ast
import re
from pathlib import Path

import notebooks as nbs  # ci/notebooks.py: conftest.py puts ci/ on the path
import pytest

from shardbook import private

ROOT = Path(__file__).resolve().parents[1]

# Code that names a private part of a library the book does not own.
PRIVATE_PATTERNS = [
    (
        re.compile(r"\b(jax|jaxlib|orbax|brainstate|brainpy|myst_nb)(\.\w+)*\._src\b"),
        "._src",
    ),
    (
        re.compile(
            r"\bfrom\s+(jax|jaxlib|orbax[.\w]*|brainstate|brainpy)\S*\s+import\s+_"
        ),
        "a private import",
    ),
    (re.compile(r"\._value\b"), "State._value"),
    (re.compile(r"(?<![A-Za-z0-9])_cache_size\b"), "jit's _cache_size"),
    (
        re.compile(r"\b(get_state_trace|stateful_fun|jitted_fun)\b"),
        "brainstate's jit internals",
    ),
    (re.compile(r"\bmyst_nb\.core\b"), "myst-nb internals"),
    (re.compile(r"\bxla_bridge\b"), "jax's xla_bridge"),
]
QUARANTINE = ROOT / "shardbook" / "private.py"


def _code_of_notebook(path: Path) -> str:
    code = nbs.code(path)
    # IPython magics and shell lines are not Python
    return "\n".join(
        "" if ln.lstrip().startswith(("%", "!")) else ln for ln in code.splitlines()
    )


def _files():
    """(name, code) of every file whose code must stay outside the quarantine."""
    out = []
    for folder in ("shardbook", "tests", "ci", "lab", "recipes", "_ext"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != QUARANTINE and path.name != "test_private.py":
                out.append((str(path.relative_to(ROOT)), path.read_text()))
    for path in nbs.notebooks():
        out.append((str(path.relative_to(ROOT)), _code_of_notebook(path)))
    for path in _shell_scripts():
        out.append((str(path.relative_to(ROOT)), _shell_code(path.read_text())))
    return out


def _shell_scripts():
    """The shell scripts (ci/, .ci/, lab/, recipes/, binder/): a shebang naming a
    shell, or a ``.sh`` name (``ci/_env.sh`` is sourced, so it has none); their inline
    Python counts."""
    found = []
    for folder in ("ci", ".ci", "lab", "recipes", "binder"):
        for path in sorted((ROOT / folder).iterdir()):
            if path.is_file() and path.suffix != ".py":
                head = path.read_bytes()[:64].split(b"\n")[0]
                if path.suffix == ".sh" or (head.startswith(b"#!") and b"sh" in head):
                    found.append(path)
    return found


def _shell_code(text: str) -> str:
    # comment lines are prose; a last line "(" keeps the parser from reading the
    # script as Python, and every other line keeps its number
    return "\n".join("" if ln.lstrip().startswith("#") else ln
                     for ln in text.splitlines()) + "\n("


def _code_lines(text: str):
    """Lines of code with comments and docstrings blanked (prose may cite a source
    file)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text.splitlines()
    lines = text.splitlines()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            for i in range(body[0].lineno - 1, body[0].end_lineno):
                lines[i] = ""
    return [ln.split("#", 1)[0] if "#" in ln else ln for ln in lines]


@pytest.mark.parametrize(
    "call",
    [
        lambda: private.gloo_on_loopback(),
        lambda: private.cluster_types(),
        lambda: private.detector_variables(),
        lambda: private.detect_cluster({}),
        lambda: private.hlo_bytes_accessed(""),
    ],
)
def test_jax_guard_names_the_pinned_version(monkeypatch, call):
    monkeypatch.setattr(private, "installed", lambda package: "9.9.9")
    with pytest.raises(
        private.PrivateAPIError,
        match=r"jax 0\.10\.2, the version this book pins.*9\.9\.9",
    ):
        call()


@pytest.mark.parametrize(
    "package, call",
    [
        ("brainstate", lambda: private.bm_jit_parts(None)),
        ("brainstate", lambda: private.replace_state_values(None, (), None)),
        ("myst-nb", lambda: private.replace_mystnb_stream_merge(None)),
    ],
)
def test_other_guards_name_the_pinned_version(monkeypatch, package, call):
    monkeypatch.setattr(private, "installed", lambda p: "0.0.1")
    with pytest.raises(
        private.PrivateAPIError, match=rf"{package} [\d.]+, the version"
    ):
        call()


def test_orbax_guard_names_the_pinned_version(monkeypatch):
    monkeypatch.setattr(private, "installed", lambda package: "0.0.1")
    with pytest.raises(private.PrivateAPIError, match=r"orbax-checkpoint 0\.12\.8"):
        with private.orbax_reads_recorded():
            pass
    assert 'version("orbax-checkpoint") ==' in private.ORBAX_KILL_BEFORE_COMMIT


def test_detectors_read_what_the_book_says():
    names = [n for n, _ in private.cluster_types()]
    assert names[:3] == ["OmpiCluster", "SlurmCluster", "Mpi4pyCluster"]
    found = private.detector_variables()
    assert "OMPI_MCA_orte_hnp_uri" in found["Open MPI"]
    assert "SLURM_STEP_NODELIST" in found["SLURM"]


def test_no_private_name_outside_the_quarantine():
    bad = []
    for name, text in _files():
        for i, line in enumerate(_code_lines(text), start=1):
            for pattern, what in PRIVATE_PATTERNS:
                if pattern.search(line):
                    bad.append(f"{name}:{i}: {what}: {line.strip()}")
    assert not bad, "private names outside shardbook/private.py:\n" + "\n".join(bad)


def _private_attributes(text: str):
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not (node.attr.startswith("__") and node.attr.endswith("__"))
        ):
            yield node.lineno, node.attr


def _foreign_private_attributes(text: str):
    """``_``-prefixed attributes not reached from ``self`` or ``cls``: another module's
    or another object's private name (scripts may keep private names of their own)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not (
            node.attr.startswith("__") and node.attr.endswith("__")
        ):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in ("self", "cls")):
                yield node.lineno, node.attr


def test_notebooks_and_tests_use_no_underscore_attribute():
    bad = []
    for name, text in _files():
        if name.startswith(("tests/", "book/")):
            bad += [
                f"{name}:{line}: .{attr}" for line, attr in _private_attributes(text)
            ]
        elif name.startswith(("ci/", "recipes/", "_ext/")) and name.endswith(".py"):
            bad += [
                f"{name}:{line}: .{attr}"
                for line, attr in _foreign_private_attributes(text)
            ]
    assert not bad, "private attributes used:\n" + "\n".join(bad)


def test_the_quarantine_test_catches_a_planted_private_name():
    planted = (
        "import jax\nx = jax._src.xla_bridge.backends()\n"
        "step.jitted_fun._cache_size()\n"
    )
    hits = {
        what
        for line in _code_lines(planted)
        for p, what in PRIVATE_PATTERNS
        if p.search(line)
    }
    assert {"._src", "jit's _cache_size", "brainstate's jit internals"} <= hits
    assert sorted(a for _, a in _private_attributes(planted)) == ["_cache_size", "_src"]
    # a script may keep private names of its own, never another module's
    script = ("class A:\n    def f(self):\n        return self._x\n"
              "coba.ledger._leaf(v)\n")
    assert [a for _, a in _foreign_private_attributes(script)] == ["_leaf"]


def test_the_quarantine_reads_the_shell_scripts():
    names = {str(p.relative_to(ROOT)) for p in _shell_scripts()}
    assert {"ci/test", "ci/_env.sh", ".ci/run", "recipes/mpirun_gpu.sh",
            "binder/start"} <= names
    planted = _shell_code("#!/bin/bash\n# jax._src in a comment is prose\n"
                          "python -c 'import jax; jax._src.xla_bridge.backends()'\n")
    hits = [what for line in _code_lines(planted) for p, what in PRIVATE_PATTERNS
            if p.search(line)]
    assert hits == ["._src", "jax's xla_bridge"]
