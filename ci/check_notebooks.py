"""Check that the notebooks' printed output fits the page: no line over 100 columns.

  python ci/check_notebooks.py [NOTEBOOK ...]     default: every notebook of _toc.yml

Every line of every stored text output that the page shows is at most 100 characters:
printed streams, tracebacks (ANSI colours removed), and text/plain results that have
no richer form (HTML, an image) shown instead.  Cells tagged remove-cell or
remove-output are not shown, so they are not checked.  Code lines are ruff's (E501,
``line-length = 88`` in ``pyproject.toml``), not this script's.  Prints each long line
as FILE: cell N, output line M, a summary per notebook, and exits 1 if any is too long.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import notebooks as nbs

ROOT = nbs.ROOT
OUTPUT_LIMIT = 100   # the one place the output width is set
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# What myst-nb shows for an output with several forms, before text/plain.
RICHER = ("application/vnd.jupyter.widget-view+json", "application/javascript",
          "text/html", "image/svg+xml", "image/png", "image/jpeg", "text/markdown",
          "text/latex")


def shown_output_text(output: dict) -> str:
    """The text of one output as the page shows it ('' if it shows no text)."""
    kind = output.get("output_type")
    if kind == "stream":
        return nbs.text(output.get("text"))
    if kind == "error":
        return ANSI.sub("", "\n".join(output.get("traceback", [])))
    data = output.get("data", {})
    if kind in ("execute_result", "display_data"):
        if not any(k in data for k in RICHER):
            return nbs.text(data.get("text/plain"))
    return ""


def long_lines(path: Path, limit: int = OUTPUT_LIMIT) -> list[tuple[int, int, int]]:
    """(cell index, output line number, length) of every shown output line over
    ``limit``."""
    found = []
    for index, cell in enumerate(nbs.load(path).get("cells", [])):
        hidden = nbs.tags(cell) & {"remove-cell", "remove-output"}
        if cell.get("cell_type") != "code" or hidden:
            continue
        n = 0
        for output in cell.get("outputs", []):
            for line in shown_output_text(output).splitlines():
                n += 1
                if len(line) > limit:
                    found.append((index, n, len(line)))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--output", type=int, default=OUTPUT_LIMIT,
                    help="output line limit")
    ap.add_argument("-q", "--quiet", action="store_true",
                    help="say nothing of notebooks within the limit")
    args = ap.parse_args(argv)
    paths = args.notebooks or nbs.notebooks()
    total = 0
    for path in paths:
        found = long_lines(path, args.output)
        try:
            name = path.resolve().relative_to(ROOT)
        except ValueError:
            name = path
        for cell, line, length in found:   # said even with -q: CI's log must show it
            print(f"{name}: cell {cell}, output line {line}: "
                  f"{length} characters (limit {args.output})")
        total += len(found)
        if not args.quiet or found:
            print(f"[notebooks] {name}: {len(found)} output line(s) over {args.output}")
    return verdict("notebooks", total,
                   f"{len(paths)} notebooks, {total} output line(s) over {args.output}")


def verdict(tag: str, failures: int, what: str) -> int:
    """Print a check's last line, ``[tag] passed: what`` or ``[tag] FAILED: what``, and
    return its exit status (1 if anything failed)."""
    print(f"[{tag}] {'FAILED' if failures else 'passed'}: {what}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
