"""What the JUnit XML of a notebook run says, one notebook at a time.

  python ci/junit.py rerun XML    print the notebooks to run once more; exit 1 if none

nbval makes each cell one test, named ``book.01-x.ipynb`` / ``Cell 3``.  ./ci/test
runs every notebook in one pytest (``--junitxml``); the record page reads each
notebook's time and result from that file (``notebooks``).

ipykernel can publish a cell's last printed lines after it has said it is idle, on a
loaded machine, and nbval then misses them (seen on CI: a cell's last three lines
gone).  A notebook whose failed cells all show differing outputs, and nothing else (no
exception, no timeout), is run once more (``rerun``); any other failure is not.
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

MISMATCH = "Cell outputs differ"
NOT_A_MISMATCH = ("caused an exception", "Timeout", "timed out")


@dataclass
class Notebook:
    """One notebook's cells in one run."""

    seconds: float = 0.0
    cells: int = 0
    failures: list[str] | None = None   # the failure text of each failed cell

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
            cls = case.get("classname", "")
            if not cls.endswith(".ipynb"):
                continue
            path = cls[: -len(".ipynb")].replace(".", "/") + ".ipynb"
            nb = seen.setdefault(path, Notebook(failures=[]))
            nb.seconds += float(case.get("time", 0))
            nb.cells += 1
            nb.failures += [(f.get("message", "") + "\n" + (f.text or ""))
                            for f in case if f.tag in ("failure", "error")]
        out.update(seen)
    return out


def output_only(nb: Notebook) -> bool:
    """Whether every failed cell of a notebook shows differing outputs alone."""
    return bool(nb.failures) and all(
        MISMATCH in text and not any(bad in text for bad in NOT_A_MISMATCH)
        for text in nb.failures)


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
