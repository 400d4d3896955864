"""Check that the notebooks fit the page: no code or printed line is too wide.

  python ci/check_notebooks.py [NOTEBOOK ...]     default: book/*.ipynb

* Every line of every code cell is at most 88 characters (--code).
* Every line of every stored text output that the page shows is at most 100
  characters (--output): printed streams, tracebacks (ANSI colours removed), and
  text/plain results that have no richer form (HTML, an image) shown instead.
Cells tagged remove-cell / remove-input (source) or remove-output are not shown, so
they are not checked.  Prints each long line as FILE:cell N:line M, a summary per
notebook, and exits 1 if any line is too long.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_LIMIT, OUTPUT_LIMIT = 88, 100
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# What myst-nb shows for an output with several forms, before text/plain.
RICHER = ("application/vnd.jupyter.widget-view+json", "application/javascript",
          "text/html", "image/svg+xml", "image/png", "image/jpeg", "text/markdown",
          "text/latex")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def shown_output_text(output: dict) -> str:
    """The text of one output as the page shows it ('' if it shows no text)."""
    kind = output.get("output_type")
    if kind == "stream":
        return _text(output.get("text"))
    if kind == "error":
        return ANSI.sub("", "\n".join(output.get("traceback", [])))
    data = output.get("data", {})
    if kind in ("execute_result", "display_data"):
        if not any(k in data for k in RICHER):
            return _text(data.get("text/plain"))
    return ""


def long_lines(path: Path, code_limit: int = CODE_LIMIT,
               output_limit: int = OUTPUT_LIMIT) -> list[tuple[str, int, int, int]]:
    """(kind, cell index, line number, length) of every line over its limit."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        if not tags & {"remove-cell", "remove-input"}:
            for n, line in enumerate(_text(cell.get("source")).splitlines(), 1):
                if len(line) > code_limit:
                    found.append(("code", index, n, len(line)))
        if tags & {"remove-cell", "remove-output"}:
            continue
        n = 0
        for output in cell.get("outputs", []):
            for line in shown_output_text(output).splitlines():
                n += 1
                if len(line) > output_limit:
                    found.append(("output", index, n, len(line)))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--code", type=int, default=CODE_LIMIT, help="code line limit")
    ap.add_argument("--output", type=int, default=OUTPUT_LIMIT,
                    help="output line limit")
    ap.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    args = ap.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "book").glob("*.ipynb"))
    total = {"code": 0, "output": 0}
    for path in notebooks:
        found = long_lines(path, args.code, args.output)
        try:
            name = path.resolve().relative_to(ROOT)
        except ValueError:
            name = path
        for kind, cell, line, length in found if not args.quiet else []:
            limit = args.code if kind == "code" else args.output
            print(f"{name}: cell {cell}, {kind} line {line}: "
                  f"{length} characters (limit {limit})")
        counts = {k: sum(1 for f in found if f[0] == k) for k in total}
        for k in total:
            total[k] += counts[k]
        print(f"[notebooks] {name}: {counts['code']} code line(s) over {args.code}, "
              f"{counts['output']} output line(s) over {args.output}")
    bad = total["code"] + total["output"]
    print(f"[notebooks] {'FAILED' if bad else 'passed'}: {len(notebooks)} notebooks, "
          f"{total['code']} code line(s) over {args.code}, "
          f"{total['output']} output line(s) over {args.output}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
