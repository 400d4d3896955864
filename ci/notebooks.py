"""The book's notebooks: which ones, in what order, and their JSON, in one place.

The list comes from ``_toc.yml`` (its order is the reading order); every script of
``ci/`` and every test that lists or reads notebooks goes through this module.

  python ci/notebooks.py                      the notebooks, one path a line
  python ci/notebooks.py --containing TEXT    only those whose code contains TEXT
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOC = ROOT / "_toc.yml"


# Pages that stand alone: their first code cell is a device setup of their own (a few
# lines of ``jax.config``) and nothing in them imports ``shardbook``, so that a reader
# can paste their code into any project, or run them in Colab from PyPI alone.
STANDALONE = ("book/00-quick-start.ipynb",)


def kernel_start_s(root: Path = ROOT) -> int:
    """The seconds a notebook's kernel may take to start, as ``./ci/test`` gives nbval:
    written there once (``kernel_start_s=N``), and read here by everything else that
    starts a kernel (``ci/execute.py``, ``lab/gpu_notebooks.py``, the tests)."""
    text = (root / "ci" / "test").read_text()
    found = re.search(r"^kernel_start_s=(\d+)$", text, re.M)
    if not found:
        raise ValueError("ci/test has no line kernel_start_s=SECONDS")
    return int(found[1])


def kernel_start_flag(root: Path = ROOT) -> str:
    """nbval's option for :func:`kernel_start_s`."""
    return f"--nbval-kernel-startup-timeout={kernel_start_s(root)}"


class TocError(ValueError):
    """``_toc.yml`` names a file that does not exist, or misses a notebook."""


# ---------------------------------------------------------------- which notebooks


def toc_entries(toc: Path = TOC) -> list[str]:
    """Every ``file:`` of the table of contents, root first, in reading order."""
    import yaml

    data = yaml.safe_load(toc.read_text(encoding="utf-8"))
    out = [data["root"]] if data.get("root") else []

    def walk(items):
        for item in items or []:
            if "file" in item:
                out.append(item["file"])
            walk(item.get("sections"))
            walk(item.get("chapters"))

    walk(data.get("parts"))
    walk(data.get("chapters"))
    return out


def _resolve(entry: str, root: Path) -> Path:
    path = root / entry
    if path.suffix in (".ipynb", ".md") and path.is_file():
        return path
    found = [p for p in (path.with_suffix(".ipynb"), path.with_suffix(".md"))
             if p.is_file()]
    if not found:
        raise TocError(f"_toc.yml names {entry!r}, and no {entry}.ipynb or .md exists")
    return found[0]


def pages(root: Path = ROOT) -> list[Path]:
    """Every page of the book (notebooks and Markdown), in reading order."""
    return [_resolve(e, root) for e in toc_entries(root / "_toc.yml")]


def notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks of the book, in reading order (absolute paths)."""
    return [p for p in pages(root) if p.suffix == ".ipynb"]


def standalone(path: Path, root: Path = ROOT) -> bool:
    """Whether ``path`` is a page that stands alone (see ``STANDALONE``)."""
    path = Path(path).resolve()
    return path.is_relative_to(root) and str(path.relative_to(root)) in STANDALONE


def helper_notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks that start with the book's install cell and use ``shardbook``."""
    return [p for p in notebooks(root) if not standalone(p, root)]


def relative(paths, root: Path = ROOT) -> list[str]:
    """Paths as the repository names them (``book/01-....ipynb``)."""
    return [str(Path(p).resolve().relative_to(root)) for p in paths]


def orphans(root: Path = ROOT) -> list[Path]:
    """Notebooks under book/ that the table of contents does not list (never built)."""
    listed = set(notebooks(root))
    return sorted(p for p in (root / "book").glob("*.ipynb") if p not in listed)


# ---------------------------------------------------------------- their JSON


def load(path: Path) -> dict:
    """A notebook as plain JSON (no validation: fast, for reading)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def dumps(nb: dict) -> str:
    """The text nbformat writes for ``nb`` (indent 1, sorted keys, a final newline)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def save(path: Path, nb: dict) -> None:
    Path(path).write_text(dumps(nb), encoding="utf-8")


def text(value) -> str:
    """A notebook string field, stored as one string or a list of lines."""
    return "".join(value) if isinstance(value, list) else (value or "")


def source(cell: dict) -> str:
    return text(cell.get("source"))


def tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def first_code_cell(nb: dict) -> dict:
    cells = code_cells(nb)
    if not cells:
        raise ValueError("the notebook has no code cell")
    return cells[0]


def output_text(output: dict) -> str:
    """The plain text of one output: a stream, or a result's text/plain."""
    return text(output.get("text")) + text(output.get("data", {}).get("text/plain"))


def code(path: Path) -> str:
    """All code of a notebook, cells joined by blank lines."""
    return "\n\n".join(source(c) for c in code_cells(load(path)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--containing", help="only notebooks whose code contains this")
    args = ap.parse_args(argv)
    for path in notebooks():
        if args.containing is None or args.containing in code(path):
            print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
