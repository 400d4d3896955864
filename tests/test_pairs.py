"""Every notebook of book/ has its text twin in book/md/ (jupytext, MyST markdown), and
the two say the same: a change to a page reads as a text diff in review.

After editing a notebook (or its twin): ``jupytext --sync book/*.ipynb``; the pairing is
set once, in ``jupytext.toml``.
"""

import copy
import json
from pathlib import Path

import jupytext
import nbformat
import notebooks as nbs  # ci/notebooks.py
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIX = "run `jupytext --sync book/*.ipynb` and commit both files"


def twin(path: Path) -> Path:
    return path.parent / "md" / f"{path.stem}.md"


def text_of(path: Path) -> str:
    """The MyST text jupytext writes for the notebook at ``path``."""
    return jupytext.writes(jupytext.read(path), fmt="md:myst")


def test_the_pairing_is_set_once():
    config = (ROOT / "jupytext.toml").read_text()
    assert 'formats = "ipynb,md//md:myst"' in config


@pytest.mark.parametrize("path", sorted((ROOT / "book").glob("*.ipynb")),
                         ids=lambda p: p.stem)
def test_every_notebook_has_its_text_twin(path):
    md = twin(path)
    assert md.exists(), f"{md.relative_to(ROOT)} is missing: {FIX}"
    assert md.read_text() == text_of(path), (
        f"{md.relative_to(ROOT)} and {path.name} differ: {FIX}")


def test_no_twin_without_its_notebook():
    stems = {p.stem for p in (ROOT / "book").glob("*.ipynb")}
    extra = [p.name for p in (ROOT / "book" / "md").glob("*.md") if p.stem not in stems]
    assert not extra, f"text files without a notebook in book/md/: {extra}"
    assert {p.stem for p in nbs.notebooks()} <= stems


def test_an_edited_notebook_is_seen(tmp_path):
    """The check can fail: one changed word in a code cell makes the pair differ."""
    path = ROOT / "book" / "01-devices-and-shards.ipynb"
    nb = nbformat.read(path, as_version=4)
    edited = copy.deepcopy(nb)
    cell = next(c for c in edited.cells if c.cell_type == "code")
    cell.source = cell.source.replace("import", "import  ", 1)
    out = tmp_path / path.name
    out.write_text(json.dumps(edited))
    assert text_of(out) != twin(path).read_text()
    out.write_text(json.dumps(nb))
    assert text_of(out) == twin(path).read_text()   # outputs and ids do not matter
