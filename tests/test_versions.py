"""Every version the repository names agrees with its one source of truth.

* Other packages: ``requirements.txt`` (written by ``./ci/lock``) pins everything the
  book imports or runs.  Every other place that names a version is checked against it:
  the ``hosted`` and ``cuda12`` extras of ``pyproject.toml``, Binder, the GPU pins in
  ``ci/``, ``shardbook.private``'s guards, conftest.py's nbval pin,
  ``shardbook.gputarget.PINS``, the footer of ``_config.yml``, and every
  "<package> X.Y.Z" in the prose and code of the repository.
* The book's own version: ``[project] version`` of ``pyproject.toml``;
  ``shardbook.__version__`` and the install cell of every notebook (``@v<version>``, or
  the branch for a ``.dev`` version: ``tests/test_install_cell.py``) follow it.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from shardbook import book, gputarget

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line (extras dropped from names)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[_norm(name.split("[")[0])] = version.strip()
    return out


PINS = _pins(ROOT / "requirements.txt")
VERSION = PYPROJECT["project"]["version"]


def test_the_book_has_one_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", VERSION), VERSION
    assert book.__version__ == VERSION, "shardbook/__init__.py: __version__"


def test_requirements_are_exact_pins_sorted_once():
    lines = [
        ln
        for ln in (ROOT / "requirements.txt").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[\w.+\-]+", ln) for ln in lines), [
        ln for ln in lines if "==" not in ln
    ]
    names = [_norm(ln.split("==")[0]) for ln in lines]
    assert len(names) == len(set(names)), "a package pinned twice"
    top = [
        _norm(ln.split("#")[0].strip())
        for ln in (ROOT / "requirements.in").read_text().splitlines()
        if ln.split("#")[0].strip()
    ]
    assert not [t for t in top if t not in PINS], "requirements.in: an unpinned name"


def test_the_installers_are_pinned_too():
    """pip (which installs uv and shardbook) and setuptools (which builds it, here and
    in a hosted install's isolated build) at requirements.txt's versions."""
    assert "pip" in PINS and "setuptools" in PINS
    env = (ROOT / "ci" / "_env.sh").read_text()
    assert "grep -m1 '^pip==' requirements.txt" in env and "--upgrade pip" not in env
    backend = PYPROJECT["build-system"]["requires"]
    assert backend == [f"setuptools=={PINS['setuptools']}"]


@pytest.mark.parametrize("extra", ["hosted", "cuda12"])
def test_pyproject_extras_follow_requirements(extra):
    reqs = PYPROJECT["project"]["optional-dependencies"][extra]
    assert reqs
    for req in reqs:
        name, version = req.split("==")
        assert PINS[_norm(name.split("[")[0])] == version, f"{extra}: {req}"


def family(names, want=re.compile(r"brain|saiunit")) -> set[str]:
    """``names`` and every BrainPy-family package they require, as installed here."""
    seen, todo = set(), [_norm(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in importlib.metadata.requires(name) or []:
            dep = _norm(re.split(r"[\s<>=!;\[]", req, maxsplit=1)[0])
            if want.match(dep) and "extra ==" not in req:
                todo.append(dep)
    return seen


def test_the_hosted_extra_pins_brainpys_whole_family():
    """A hosted runtime installs only the extra's pins: a BrainPy package that one of
    them needs and the extra leaves out is resolved unpinned (as brainpy_state was)."""
    hosted = {_norm(r.split("==")[0])
              for r in PYPROJECT["project"]["optional-dependencies"]["hosted"]}
    assert family(hosted) <= hosted, sorted(family(hosted) - hosted)
    assert "brainpy-state" in family({"brainpy"}) - {"brainpy"}   # the walk finds one


def test_gpu_pins_follow_the_jax_version():
    jax = PINS["jax"]
    for path in ("ci/requirements-gpu.txt", "ci/requirements-gpu-target.txt"):
        pins = _pins(ROOT / path)
        for name in ("jax-cuda12-plugin", "jax-cuda12-pjrt"):
            assert pins[name] == jax, f"{path}: {name}"
    assert _pins(ROOT / "ci/requirements-gpu.txt")["jax"] == jax
    gpu = _pins(ROOT / "ci/requirements-gpu.txt")
    target = _pins(ROOT / "ci/requirements-gpu-target.txt")
    assert all(gpu[k] == v for k, v in target.items()), "the two GPU files disagree"
    wanted = [
        ln
        for ln in (ROOT / "ci/requirements-gpu-target.txt").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert list(gputarget.PINS) == wanted, "shardbook.gputarget.PINS"


def test_the_nbval_wrapper_follows_requirements():
    text = (ROOT / "conftest.py").read_text()
    assert re.search(r'^NBVAL_PIN = "([^"]+)"$', text, re.M)[1] == PINS["nbval"]


def test_private_guards_follow_requirements():
    from shardbook import private as p
    assert p.PINNED_JAX == PINS["jax"]
    assert p.PINNED_ORBAX == PINS["orbax-checkpoint"]
    assert p.PINNED_BRAINSTATE == PINS["brainstate"]
    assert p.PINNED_MYSTNB == PINS["myst-nb"]


def test_binder_installs_requirements_txt():
    lines = [
        ln.strip()
        for ln in (ROOT / "binder/requirements.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines == ["-r ../requirements.txt"]


def test_footer_names_the_pinned_versions():
    footer = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]["extra_footer"]
    m = re.search(r"BrainPy (\d+(?:\.\d+)+) and JAX (\d+(?:\.\d+)+)", footer)
    assert m and m.groups() == (PINS["brainpy"], PINS["jax"]), footer


# The names that prose writes before a version ("JAX 0.10.2", "brainpy==2.8.2").
MENTION = re.compile(
    r"(?i)\b(brainpy[_-]state|brainpy|brainstate|brainevent|braintools|brainunit|saiunit|jaxlib|jax"
    r"|orbax-checkpoint|orbax|myst-nb|jupyter[ -]book|nbval|numpy|scikit-learn"
    r"|matplotlib|numba)(?:\s+and\s+jaxlib)?(?:\s+|==)v?(\d+\.\d+\.\d+(?:\.post\d+)?)\b"
)
ALIASES = {"orbax": "orbax-checkpoint", "jupyter book": "jupyter-book"}
# Versions that are not the book's pins but are named on purpose, with the reason.
FOREIGN = {
    ("jax", "0.11.2"): "the JAX preinstalled on the lent H200 machine (lab/gpu_check)",
    ("jaxlib", "0.11.2"): "the same machine's jaxlib",
    ("numba", "0.68.0"): "the lent H200 machine's, as its lab/gpu_check run recorded",
    ("numpy", "2.5.2"): "the lent H200 machine's, as its lab/gpu_check run recorded",
    ("orbax-checkpoint", "0.12.4"): "the lent H200 machine's, per lab/gpu_check",
    (
        "numpy",
        "2.3.5",
    ): "Brian 2's own venv (lab/requirements-brian2.txt): brian2 2.9.0, the "
    "newest for Python 3.11, does not import with numpy 2.4",
}
TEXT = (
    ".md",
    ".ipynb",
    ".py",
    ".toml",
    ".yml",
    ".txt",
    ".sh",
    ".sbatch",
    ".cfg",
    ".in",
)


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        ROOT / f
        for f in out.stdout.split()
        if f.endswith(TEXT) and (ROOT / f).is_file()
    ]


def _wrong_versions(text: str) -> tuple[int, list[str]]:
    """(mentions found, those that are not the pinned version or a prefix of it)."""
    wrong, found = [], 0
    for m in MENTION.finditer(text):
        name = _norm(ALIASES.get(m.group(1).lower(), m.group(1)))
        pin, said = PINS[name], m.group(2)
        found += 1
        if (name, said) in FOREIGN:
            continue
        if not (pin == said or pin.startswith(said + ".")):
            wrong.append(f"{m.group(0)!r} (pinned {pin})")
    return found, wrong


def test_every_version_named_in_the_repository_is_the_pinned_one():
    """A three-part version after a package's name anywhere (prose, outputs, code,
    comments) must be the pinned one, or a prefix of it (Jupyter Book 1.0.4).
    Two-part versions are history ("the default since JAX 0.5") and are not read."""
    wrong, seen = [], 0
    for path in _tracked_text_files():
        found, bad = _wrong_versions(path.read_text(errors="replace"))
        seen += found
        wrong += [f"{path.relative_to(ROOT)}: {b}" for b in bad]
    assert seen > 20, "the pattern found almost nothing: it is broken"
    assert not wrong, "\n".join(wrong)


def test_a_wrong_version_in_prose_is_caught():
    jax = PINS["jax"]
    wrong = jax.rsplit(".", 1)[0] + "." + str(int(jax.rsplit(".", 1)[1]) + 1)
    found, bad = _wrong_versions(
        f"Validated with JAX {wrong}, jaxlib=={jax}, Jupyter Book 1.0.4 and JAX 0.5."
    )
    assert found == 3 and bad == [f"'JAX {wrong}' (pinned {jax})"]
    # a name with an underscore (the quick start's install line)
    state, said = PINS["brainpy-state"], "brainpy_state==" + "0.0.1"
    assert _wrong_versions(f"pip install {said}") == (1, [f"'{said}' (pinned {state})"])
