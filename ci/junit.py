"""What the JUnit XML of a notebook run says, one notebook at a time.

  python ci/junit.py rerun XML NOTEBOOK...   print the notebooks to run once more;
                                             exit 1 if none

nbval makes each cell one test; the repository's conftest.py records each cell's
notebook path as a property (pytest's own class name, ``book.01-x.ipynb``, turns every
``/`` into ``.``, which cannot be undone for a path with a dot).  ./ci/test runs every
notebook in one pytest (``--junitxml``); the record page reads each notebook's time
and result from that file (``notebooks``).

ipykernel can publish a cell's last printed lines after it has said it is idle, on a
loaded machine, and nbval then misses them (seen on CI: a cell's last three lines
gone).  A notebook whose failed cells all failed for differing outputs alone (nbval's
reason, "Cell N: Cell outputs differ") is run once more (``rerun``).  Nothing is run
again when anything else went wrong: an exception, a timeout, a kernel that died
mid-cell (the repository's conftest.py fails that cell within seconds, with the
kernel's exit code), a notebook that did not collect or is missing from the file, an
error outside any notebook, or a pytest-xdist worker that crashed (the worker that
takes over starts the notebook's remaining cells in a new kernel, so some cells are
reported twice).
"""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

MISMATCH = "Cell outputs differ"
TWICE = "a cell reported twice (its worker crashed)"
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
        names: set = set()
        for case in ET.parse(xml).getroot().iter("testcase"):
            path = _path(case)
            if path is None:
                continue
            nb = seen.setdefault(path, Notebook(failures=[]))
            nb.seconds += float(case.get("time", 0))
            nb.cells += 1
            nb.failures += [reason(f.get("message", "")) for f in case
                            if f.tag in ("failure", "error")]
            if (path, case.get("name")) in names:
                nb.failures.append(TWICE)
            names.add((path, case.get("name")))
        out.update(seen)
    return out


def stray_failures(xml: Path) -> int:
    """Failures and errors of no notebook: a collection error, pytest's own."""
    return sum(1 for case in ET.parse(xml).getroot().iter("testcase")
               if _path(case) is None
               and any(f.tag in ("failure", "error") for f in case))


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


def rerun(xml: Path, asked=()) -> list[str] | None:
    """The failed notebooks to run again, or None when a failure is of another kind,
    a notebook of ``asked`` is missing, or nothing failed: then a rerun cannot make
    the run pass."""
    runs = notebooks(xml)
    failed = {p: nb for p, nb in runs.items() if not nb.passed}
    missing = [p for p in asked if p not in runs]
    if (not failed or missing or stray_failures(xml)
            or not all(output_only(nb) for nb in failed.values())):
        return None
    return sorted(failed)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "rerun":
        sys.exit(__doc__.splitlines()[2].strip())
    xml, root = Path(sys.argv[2]), Path(__file__).resolve().parent.parent
    asked = [Path(p).resolve() for p in sys.argv[3:]]  # as conftest.py names them
    asked = [str(p.relative_to(root) if p.is_relative_to(root) else p) for p in asked]
    again = rerun(xml, asked) if xml.exists() else None
    print("\n".join(again or []))
    sys.exit(0 if again else 1)
