"""Write book/_generated/validation.md: how the book's outputs are validated, from the
files that do it, never typed by hand.

- the sanitizers of ci/sanitize.cfg (what strict nbval does not compare, and why);
- every notebook cell whose output is not compared (tag ``nbval-ignore-output``), with
  the reason its first line gives (``# output not compared: <reason>``);
- every equivalence check (``shardbook.verify``) with its tolerance, the configurations
  it was measured in and its worst margin, from book/data/tolerance_margins.json.

  python ci/validation.py          (run by ./ci/build and ./ci/test before the build)
"""
import configparser
import json
import re
import sys
from collections import Counter
from pathlib import Path

import notebooks as nbs

ROOT = nbs.ROOT
OUT = ROOT / "book" / "_generated" / "validation.md"
MARGINS = ROOT / "book" / "data" / "tolerance_margins.json"
REASON_RE = re.compile(r"^#\s*output not compared:\s*(.+)$")


def ignored_cells(root: Path = ROOT) -> list[dict]:
    """Every code cell tagged nbval-ignore-output: its notebook, index and reason."""
    rows = []
    for path in nbs.notebooks(root):
        for i, cell in enumerate(nbs.code_cells(nbs.load(path)), 1):
            if "nbval-ignore-output" not in nbs.tags(cell):
                continue
            first = nbs.source(cell).splitlines()[:1]
            m = REASON_RE.match(first[0].strip()) if first else None
            rows.append(dict(notebook=path.name, cell=i,
                             reason=m.group(1) if m else None))
    return rows


def sanitizers(root: Path = ROOT) -> list[tuple[str, str, str]]:
    cfg = configparser.ConfigParser()
    cfg.read(root / "ci" / "sanitize.cfg")
    return [(s, cfg[s]["regex"], cfg[s]["replace"]) for s in cfg.sections()]


def fmt_margin(c: dict) -> str:
    if c["margin"] is None:
        return "bit-identical in every run"
    return f"{c['margin']:,.0f}x"


def write() -> None:
    lines = ["## What strict nbval does not compare", "",
             "The sanitizers of `ci/sanitize.cfg` replace these patterns in both the "
             "stored and the fresh output before comparing:", "",
             "| sanitizer | pattern | becomes |", "| --- | --- | --- |"]
    for name, regex, repl in sanitizers():
        cell = regex.replace("|", "\\|")   # a pipe would end the table cell
        lines.append(f"| {name} | `{cell}` | `{repl}` |")
    cells = ignored_cells()
    lines += ["", "Cells whose output is not compared at all (tag "
              "`nbval-ignore-output`; the cell still runs, and its asserts still "
              "hold):", ""]
    if cells:
        lines += ["| notebook | code cell | why |", "| --- | ---: | --- |"]
        lines += [f"| `{r['notebook']}` | {r['cell']} | {r['reason']} |" for r in cells]
    else:
        lines.append("None.")
    lines += ["", "## Equivalence checks and their margins", ""]
    if MARGINS.exists():
        data = json.loads(MARGINS.read_text())
        prov = data["provenance"]
        parts = Counter(c.get("measured", prov["command"])
                        for c in data["checks"].values())
        lines += [
            f"Measured with `./lab/margins` ({prov['cpu']}, {prov['machine']}; JAX "
            f"{prov['versions'].get('jax')}), in parts, the last on "
            f"{prov['date'][:10]}. A margin is the tolerance divided by the worst "
            "observed difference, over every device count and XLA:CPU ISA listed; "
            "`tests/test_margins.py` requires at least 10x. The parts (each check's "
            "`measured` in the data file; those before 2026-12-06 ran the script "
            "from `ci/`, where it was then):", ""]
        lines += [f"- {n} check{'s' * (n > 1)}: `{part}`"
                  for part, n in sorted(parts.items())]
        lines += [
            "",
            "| check | tolerance | runs (ISA / devices) | worst margin |",
            "| --- | --- | --- | ---: |"]
        for name, c in data["checks"].items():
            tol = ("bit for bit" if c["exact"]
                   else f"rtol {c['rtol']:g}, atol {c['atol']:g}")
            runs = ", ".join(c["runs"])
            lines.append(f"| `{name}` | {tol} | {runs} | {fmt_margin(c)} |")
    else:
        lines.append("No margins have been measured yet: run `./lab/margins`.")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"[validation] wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(write())
