"""Every tolerance of the book leaves at least a 10x margin over the worst difference
observed, and every stored verdict was measured.

book/data/tolerance_margins.json is written by ./lab/margins, which runs the notebooks
at device counts 1 to 8 natively and under --xla_cpu_max_isa=SSE4_2 with BOOK_GAP_LOG.
The verdicts are read from the notebooks' stored outputs, which strict nbval proves are
what the code prints, so a tolerance changed in a notebook without re-measuring fails
here.
"""

import json
import sys
from pathlib import Path

import pytest

from shardbook.verify import VERDICT_RE

ROOT = Path(__file__).resolve().parent.parent
MARGINS = ROOT / "book" / "data" / "tolerance_margins.json"
sys.path.insert(0, str(ROOT / "ci"))
sys.path.insert(0, str(ROOT / "lab"))
import notebooks as nbs  # noqa: E402
from validation import ignored_cells  # noqa: E402


def stored_verdicts() -> dict:
    found = {}
    for path in nbs.notebooks():
        for cell in nbs.code_cells(nbs.load(path)):
            for out in cell.get("outputs", []):
                for m in VERDICT_RE.finditer(nbs.output_text(out)):
                    tol = (
                        None
                        if m["rtol"] is None
                        else (float(m["rtol"]), float(m["atol"]))
                    )
                    found.setdefault(m["check"], set()).add((path.name, tol))
    return found


@pytest.fixture(scope="module")
def margins():
    assert MARGINS.exists(), (
        "book/data/tolerance_margins.json is missing: run ./lab/margins"
    )
    return json.loads(MARGINS.read_text())


def test_every_stored_verdict_was_measured_with_its_tolerance(margins):
    checks = margins["checks"]
    verdicts = stored_verdicts()
    assert verdicts, "no verdict in any stored output: the chapters print none?"
    for name, seen in verdicts.items():
        assert name in checks, (
            f"{name} is printed by {seen} but was never measured: ./lab/margins"
        )
        c = checks[name]
        for nb, tol in seen:
            want = None if c["exact"] else (c["rtol"], c["atol"])
            assert tol == want, f"{name} in {nb}: tolerance {tol}, measured with {want}"


def misplaced(checks: dict, verdicts: dict) -> list:
    """The checks whose record names a notebook other than the ones that print them."""
    return [f"{name}: recorded in {checks[name]['notebook']}, printed by "
            f"{sorted(nb for nb, _ in seen)}"
            for name, seen in verdicts.items()
            if name in checks
            and Path(checks[name]["notebook"]).name not in {nb for nb, _ in seen}]


def test_every_check_was_measured_in_the_notebook_that_prints_it(margins):
    """A page split or renamed keeps its checks' names; their margins must then be
    measured again where the checks now run (./lab/margins on those pages)."""
    verdicts = stored_verdicts()
    assert not misplaced(margins["checks"], verdicts)
    # planted: the record of chapter 3 before it was split into pages
    name = next(iter(verdicts))
    old = {**margins["checks"], name: {**margins["checks"][name],
                                       "notebook": "book/03-model-parallelism.ipynb"}}
    assert misplaced(old, verdicts)


def test_every_tolerance_is_at_least_ten_times_the_worst_case(margins):
    low = {
        k: c["margin"]
        for k, c in margins["checks"].items()
        if c["margin"] is not None and c["margin"] < 10
    }
    assert not low, f"tolerances with less than a 10x margin: {low}"


def test_the_margins_cover_device_counts_and_two_isas(margins):
    runs = {r for c in margins["checks"].values() for r in c["runs"]}
    for isa in ("native", "SSE4_2"):
        for n in (1, 2, 4, 8):
            assert f"{isa}/{n}" in runs, f"no check ran on {n} device(s) under {isa}"
    for name, c in margins["checks"].items():
        isas = {r.split("/")[0] for r in c["runs"]}
        assert isas == {"native", "SSE4_2"}, f"{name} was measured under {isas} only"


def test_every_uncompared_cell_says_why():
    for row in ignored_cells(ROOT):
        assert row["reason"], (
            f"{row['notebook']} code cell {row['cell']} is tagged "
            "nbval-ignore-output without '# output not compared: <reason>'"
        )


def test_an_update_keeps_where_every_other_check_was_measured(margins, tmp_path):
    """``lab/margins --update`` over a subset rewrites only the checks it re-measured
    (it once stamped its own command on every kept check)."""
    import subprocess

    name, check = next(iter(margins["checks"].items()))
    row = dict(
        check=name,
        rtol=check["rtol"],
        atol=check["atol"],
        exact=check["exact"],
        notebook=check["notebook"],
        isa="native",
        devices=8,
        ratio=0.01,
    )
    log = tmp_path / "gaps.jsonl"
    log.write_text(json.dumps(row) + "\n")
    out = tmp_path / "margins.json"
    out.write_text(MARGINS.read_text())
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "lab" / "margins.py"),
            str(log),
            str(out),
            "--update",
            "--command",
            "planted",
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    got = json.loads(out.read_text())["checks"]
    assert got[name]["measured"].startswith("planted, ")  # re-measured: this run
    for other, c in margins["checks"].items():
        if other != name:
            # its own record, or the file's command that measured the rest
            want = c.get("measured", margins["provenance"]["command"])
            assert got[other]["measured"] == want, other
