"""The first code cell of every notebook, and its hosted branch, against a local wheel.

Every notebook starts with the one canonical cell of ``ci/install_cell.py``.  In Colab
or Kaggle that cell installs ``shardbook[hosted] @ git+<repository>@v<version>``: the
book's own tagged version, whose ``hosted`` extra pins the book's packages.  Here the
cell runs in a real IPython shell with ``google.colab`` faked in ``sys.modules`` and
the ``%pip`` magic captured; the requirement it asks for is then met by a wheel built
from this checkout, installed (``--no-deps``) into a temporary virtual environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import install_cell
import notebooks as nbs
import pyrun  # tests/pyrun.py
import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
REPO_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
REF = install_cell.ref()   # v<version>, or the branch for a .dev version

DRIVER = r"""
import json, shutil, sys, types
from IPython.core.interactiveshell import InteractiveShell

gpu = sys.argv[1] == "gpu"
colab = sys.modules["google.colab"] = types.ModuleType("google.colab")   # "Colab"
colab.output = sys.modules["google.colab.output"] = types.ModuleType("output")  # jax
which = shutil.which
shutil.which = lambda name, *a, **k: (("/usr/bin/nvidia-smi" if gpu else None)
                                      if name == "nvidia-smi" else which(name, *a, **k))
shell = InteractiveShell.instance()
asked = []
shell.register_magic_function(asked.append, "line", "pip")      # %pip is captured
result = shell.run_cell(open(sys.argv[2]).read())
info = shell.user_ns.get("info")
print("ANSWER " + json.dumps(dict(pip=asked, ok=result.success,
                                  devices=getattr(info, "count", None))))
"""


def test_every_notebook_starts_with_the_canonical_cell():
    want = install_cell.canonical()
    for path in nbs.helper_notebooks():
        got = nbs.source(nbs.first_code_cell(nbs.load(path)))
        assert got == want, f"{path.name}: run python ci/install_cell.py --write"
    assert f"git+{REPO_URL}@{REF}" in want
    assert want.endswith(
        "\nfrom shardbook import book\n\n# N simulated CPU devices "
        "(N = $BOOK_NUM_DEVICES, default 8), or all real GPUs/TPUs\n"
        "info = book.setup_devices()"
    )


def test_the_writer_puts_it_into_a_first_cell_and_keeps_the_rest(tmp_path):
    old = {
        "cell_type": "code",
        "execution_count": 1,
        "id": "a",
        "source": ["x = 1"],
        "metadata": {"tags": ["hide-cell"]},
        "outputs": [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}],
    }
    path = tmp_path / "nb.ipynb"
    nbs.save(
        path,
        {
            "cells": [
                {"cell_type": "markdown", "id": "m", "metadata": {}, "source": ["# T"]},
                old,
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
    )
    assert install_cell.differs(path) and install_cell.write(path)
    cell = nbs.first_code_cell(nbs.load(path))
    assert nbs.source(cell) == install_cell.canonical()
    assert cell["outputs"] == old["outputs"] and cell["metadata"] == old["metadata"]
    assert not install_cell.write(path), "a second write changes nothing"
    assert install_cell.main([str(path)]) == 0


def _run_cell(tmp_path, branch: str) -> dict:
    cell = tmp_path / "cell.py"
    cell.write_text(install_cell.canonical())
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(JAX_PLATFORMS="cpu", BOOK_NUM_DEVICES="2")
    env.pop("KAGGLE_KERNEL_RUN_TYPE", None)
    run = pyrun.python(
        str(driver), branch, str(cell), cwd=tmp_path, env=env, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return pyrun.marked_json(run.stdout, "ANSWER ")


def _wheel(tmp_path) -> Path:
    """A wheel of this checkout's shardbook, built from a copy (no build/ left here)."""
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "shardbook",
        src / "shardbook",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copytree(ROOT / "book" / "data", src / "book" / "data")
    shutil.copy(ROOT / "pyproject.toml", src)
    out = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = out.glob("shardbook-*.whl")
    return wheel


def test_hosted_cell_installs_the_books_tagged_version_from_a_local_wheel(tmp_path):
    answer = _run_cell(tmp_path, "cpu")
    assert answer["ok"], "the cell failed in IPython"
    assert answer["devices"] == 2  # and then set up the devices
    want = f'install -q "shardbook[hosted] @ git+{REPO_URL}@{REF}"'
    assert answer["pip"] == [want]
    req = Requirement(want.split('"')[1])
    assert req.name == "shardbook" and req.extras == {"hosted"}
    assert req.url == f"git+{REPO_URL}@{REF}"

    gpu = _run_cell(tmp_path, "gpu")
    assert gpu["pip"] == [want.replace("[hosted]", "[hosted,cuda12]")]

    # What that requirement resolves to: this checkout, at this version, with its pins.
    wheel = _wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"shardbook-{VERSION}.dist-info/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in meta
    for pin in PROJECT["optional-dependencies"]["hosted"]:
        assert f'Requires-Dist: {pin}; extra == "hosted"' in meta, pin
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=120,
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, shardbook, shardbook.book as b, "
            "shardbook.gpudata as g; d = b.data_dir(); "
            "print(shardbook.__version__, m.version('shardbook'), shardbook.__file__, "
            "d, len(list((d / 'gpu_programs').glob('*.json.gz'))), "
            "g.load('h200')['provenance']['device_kind'].replace(' ', '_'))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    version, installed, where, data, programs, gpu = probe.stdout.split()
    assert version == installed == VERSION
    assert Path(where).is_relative_to(venv), "imported the checkout, not the wheel"
    # the pages' measured data came with it (a hosted runtime has no book/data)
    stored = ROOT / "book" / "data" / "gpu_programs"
    assert Path(data).is_relative_to(venv) and Path(data).name == "_data", data
    assert int(programs) == len(list(stored.glob("*.json.gz"))) > 0
    assert gpu == "NVIDIA_H200"


RECIPES = [ROOT / "recipes" / "run_coba.py", ROOT / "recipes" / "train_rnn.py"]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipes_install_the_same_tagged_version(path):
    assert f"URL=git+{REPO_URL}@{REF}\n" in path.read_text()


def test_a_release_installs_its_tag_and_a_development_version_the_branch(tmp_path):
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text())
    for version, want in (("1.2.0", "v1.2.0"), ("1.2.0.dev0", "main")):
        (tmp_path / "pyproject.toml").write_text(f'[project]\nversion = "{version}"\n')
        assert install_cell.ref(tmp_path) == want
