"""Every data file under ``book/data/`` says how it was made, and that command still
names a script of this repository and options that script takes.

The measurement scripts moved from ``ci/`` to ``lab/`` in commit 2da0fac (2026-12-06),
with the same arguments.  A file made before the move keeps the command that really ran
(provenance is history); its ``ci/`` script must then exist under ``lab/``.  The pages
that print such a command say where the script is now.
"""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MOVED = "2026-12-06T01:40"          # the commit that moved ci/*.py to lab/ (UTC)
SCRIPT = re.compile(r"(?:\./)?(?:ci|lab)/[\w.-]+")
FLAG = re.compile(r"(?<!\S)(--[a-z][\w-]*)")
FILES = sorted((ROOT / "book" / "data").rglob("*.json"))


def script_today(path: str, date: str) -> Path:
    """The file that ``path`` (as a command named it on ``date``) is now."""
    path = path.removeprefix("./")
    if path.startswith("ci/") and date < MOVED:
        path = "lab/" + path.removeprefix("ci/")
    return ROOT / path


def problems(command: str, date: str) -> list[str]:
    """What in ``command`` (run on ``date``) no longer runs: a missing script, or an
    option its source (or the shared ``lab/coba_cli.py``) does not define."""
    found = SCRIPT.findall(command)
    if not found:
        return [f"names no script of ci/ or lab/: {command!r}"]
    script = script_today(found[0], date)
    if not script.is_file():
        return [f"{found[0]} is not in the repository (looked for {script})"]
    source = script.read_text()
    if script.suffix != ".py" and (script.with_suffix(".py")).is_file():
        source += script.with_suffix(".py").read_text()   # a shell wrapper's script
    source += (ROOT / "lab" / "coba_cli.py").read_text()
    return [f"{script.name} takes no {flag}" for flag in FLAG.findall(command)
            if f'"{flag}"' not in source]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_data_file_names_a_command_that_runs_today(path):
    data = json.loads(path.read_text())
    prov = data.get("provenance") or {}
    assert prov.get("command") and prov.get("date"), f"{path.name}: no command or date"
    assert not problems(prov["command"], prov["date"]), problems(prov["command"],
                                                                   prov["date"])


def test_a_command_that_no_longer_runs_is_found():
    ok, now, before = "python lab/coba_4m.py --out x.json", "2026-12-07", "2026-12-03"
    moved = ok.replace("lab/", "ci/")
    assert not problems(ok, now)
    assert not problems(moved, before)     # made before the move: ci/ is now lab/
    assert problems(moved, now)            # after it, ci/ is a wrong path
    assert problems(ok.replace("coba_4m", "coba_5m"), now)
    assert problems(ok + " --neurons 5", now) == ["coba_4m.py takes no --neurons"]
    assert problems("make data", now)
