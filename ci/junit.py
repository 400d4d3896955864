"""What the JUnit XML of a notebook run says, one notebook at a time.

  python ci/junit.py rerun XML    print the notebooks to run once more; exit 1 if none

nbval makes each cell one test; the repository's conftest.py records each cell's
notebook path as a property (pytest's own class name, ``book.01-x.ipynb``, turns every
``/`` into ``.``, which cannot be undone for a path with a dot).  ./ci/test runs every
notebook in one pytest (``--junitxml``); the record page reads each notebook's time
and result from that file (``notebooks``).

ipykernel can publish a cell's last printed lines after it has said it is idle, on a
loaded machine, and nbval then misses them (seen on CI: a cell's last three lines
gone).  A notebook whose failed cells all failed for differing outputs alone (nbval's
reason, "Cell N: Cell outputs differ") is run once more (``rerun``); an exception, a
timeout or a kernel that died is not.
"""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

MISMATCH = "Cell outputs differ"
# nbval's reason, the second line of its failure message; its colours, as JUnit writes
REASON = re.compile(r"^Cell \d+: (.*)$", re.MULTILINE)
ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")


@dataclass
class Notebook:
    """One notebook's cells in one run."""

    seconds: float = 0.0
    cells: int = 0
    failures: list[str] | None = None   # nbval's reason for each failed cell

    @property
    def passed(self) -> bool:
        return not self.failures and self.cells > 0


def notebooks(*xmls: Path) -> dict[str, Notebook]:
    """``{"book/01-x.ipynb": Notebook}`` from these files; a notebook in a later file
    (a rerun) replaces its entry from an earlier one."""
    out: dict[str, Notebook] = {}
    for xml in xmls:
        seen: dict[str, Notebook] = {}
        for case in ET.parse(xml).getroot().iter("testcase"):
            path = _path(case)
            if path is None:
                continue
            nb = seen.setdefault(path, Notebook(failures=[]))
            nb.seconds += float(case.get("time", 0))
            nb.cells += 1
            nb.failures += [reason(f.get("message", "")) for f in case
                            if f.tag in ("failure", "error")]
        out.update(seen)
    return out


def _path(case) -> str | None:
    """A cell's notebook: the ``notebook`` property, else from the class name."""
    for prop in case.iter("property"):
        if prop.get("name") == "notebook":
            return prop.get("value")
    cls = case.get("classname", "")
    if cls.endswith(".ipynb"):
        return cls[: -len(".ipynb")].replace(".", "/") + ".ipynb"
    return None


def reason(message: str) -> str:
    """nbval's reason in a failure message (its ``Cell N: ...`` line), else the
    message's first line (pytest-timeout's, a kernel's death)."""
    message = ANSI.sub("", message)
    found = REASON.search(message)
    return (found.group(1) if found else (message.splitlines() or [""])[0]).strip()


def output_only(nb: Notebook) -> bool:
    """Whether every failed cell of a notebook failed for differing outputs alone."""
    return bool(nb.failures) and all(r == MISMATCH for r in nb.failures)


def rerun(xml: Path) -> list[str] | None:
    """The failed notebooks to run again, or None when a failure is of another kind
    (or nothing failed): then a rerun cannot make the run pass."""
    failed = {p: nb for p, nb in notebooks(xml).items() if not nb.passed}
    if not failed or not all(output_only(nb) for nb in failed.values()):
        return None
    return sorted(failed)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "rerun":
        sys.exit(__doc__.splitlines()[2].strip())
    again = rerun(Path(sys.argv[2])) if Path(sys.argv[2]).exists() else None
    print("\n".join(again or []))
    sys.exit(0 if again else 1)
