"""Strict nbval must fail when a stored output no longer matches what the code produces.

We take the first cells of chapter 1, run strict nbval on them as stored (it passes),
then change one stored output line and run it again (it must fail).  This guards the
promise that the committed outputs are exactly what the code prints.
"""

import copy
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import notebooks as nbs  # ci/notebooks.py: conftest.py puts ci/ on the path

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "book" / "01-devices-and-shards.ipynb"


def _first_cells(nb, n_code):
    out, seen = [], 0
    for cell in nb.cells:
        out.append(cell)
        seen += cell.cell_type == "code"
        if seen == n_code:
            break
    nb = copy.deepcopy(nb)
    nb.cells = out
    return nb


def _nbval(*paths, junit):
    """Strict nbval of ``paths`` in ONE pytest process (each notebook still gets its
    own kernel): the outcome of each cell in the order run (pytest runs the files in
    the order given; its JUnit XML keeps that order) and the run's output."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "BOOK_NUM_DEVICES": "8"}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--nbval",
        "--nbval-current-env",
        nbs.kernel_start_flag(),
        "--nbval-sanitize-with",
        str(ROOT / "ci" / "sanitize.cfg"),
        f"--junitxml={junit}",
        *(str(p) for p in paths),
    ]
    res = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=paths[0].parent, timeout=600
    )
    outcomes = []
    for case in ET.parse(junit).iter("testcase"):
        bad = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        outcomes.append(bad[0] if bad else "passed")
    return outcomes, res


def test_changed_stored_output_fails(tmp_path):
    nb = _first_cells(nbformat.read(CHAPTER, as_version=4), n_code=3)
    good = tmp_path / "as_stored.ipynb"
    nbformat.write(nb, good)

    target = nb.cells[[i for i, c in enumerate(nb.cells) if c.cell_type == "code"][-1]]
    text = target.outputs[0]["text"]
    assert "0 cpu" in text or "0 gpu" in text, text
    target.outputs[0]["text"] = text.replace(
        "0 ", "9 ", 1
    )  # one character of one stored output
    bad = tmp_path / "tampered.ipynb"
    nbformat.write(nb, bad)
    outcomes, res = _nbval(good, bad, junit=tmp_path / "junit.xml")  # one start-up
    n = sum(c.cell_type == "code" for c in nb.cells)  # cells per notebook (items)
    assert len(outcomes) == 2 * n, (outcomes, res.stdout[-3000:])
    as_stored, tampered = outcomes[:n], outcomes[n:]
    assert "passed" in as_stored and not {"failure", "error"} & set(as_stored), (
        outcomes,
        res.stdout[-3000:],
    )
    assert res.returncode != 0, "strict nbval accepted a changed stored output"
    assert "failure" in tampered, (outcomes, res.stdout[-3000:])
    assert "mismatch" in res.stdout.lower() or "failed" in res.stdout.lower(), (
        res.stdout[-3000:]
    )
