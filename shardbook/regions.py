"""Named regions of the package's source, for the chapters to show.

A chapter shows code from ``shardbook`` by region name, never by searching for a string,
so reformatting a helper cannot silently change what a chapter shows.  A region lies
between the lines ``# region: NAME`` and ``# endregion``, each alone on its line and not
shown.  Regions may nest (inner markers are removed from the text); names are unique
across the package (``tests/test_doorway.py``).  This module imports neither JAX nor
BrainPy.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Region", "RegionError", "regions", "region", "show"]

PACKAGE = Path(__file__).resolve().parent
_OPEN = re.compile(r"^\s*# region: ([\w.\-]+)\s*$")
_CLOSE = re.compile(r"^\s*# endregion\s*$")


class RegionError(KeyError):
    """A region that does not exist, or markers that do not match."""

    def __str__(self) -> str:  # KeyError quotes its message; this one reads as text
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Region:
    name: str
    path: Path      # the file, relative to the package's parent folder
    first: int      # first line shown (1-based, after the opening marker)
    last: int       # last line shown
    text: str       # the source, dedented, inner markers removed


def _scan(path: Path, package: Path) -> list[Region]:
    lines = path.read_text().splitlines()
    stack, found = [], []
    rel = path.relative_to(package.parent)
    for i, line in enumerate(lines, start=1):
        m = _OPEN.match(line)
        if m:
            stack.append((m.group(1), i))
            continue
        if _CLOSE.match(line):
            if not stack:
                raise RegionError(f"{rel}:{i}: '# endregion' without '# region: NAME'")
            name, start = stack.pop()
            body = [ln for ln in lines[start:i - 1]
                    if not (_OPEN.match(ln) or _CLOSE.match(ln))]
            text = textwrap.dedent("\n".join(body)).strip("\n")
            if not text.strip():
                raise RegionError(f"{rel}:{start}: region {name!r} is empty")
            found.append(Region(name, rel, start + 1, i - 1, text))
    if stack:
        name, start = stack[-1]
        raise RegionError(f"{rel}:{start}: region {name!r} is never closed")
    return found


_CACHE: dict = {}


def regions(package=None) -> dict[str, Region]:
    """Every region of the package (or of the folder ``package``), by name; read again
    only when a file changed."""
    package = Path(package) if package is not None else PACKAGE
    files = sorted(package.rglob("*.py"))
    key = (str(package), tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size)
                               for f in files))
    if key not in _CACHE:
        out: dict[str, Region] = {}
        for path in files:
            for r in _scan(path, package):
                if r.name in out:
                    raise RegionError(f"region {r.name!r} is defined twice: "
                                      f"{out[r.name].path}:{out[r.name].first} and "
                                      f"{r.path}:{r.first}")
                out[r.name] = r
        _CACHE[key] = out
    return _CACHE[key]


def region(name: str, package=None) -> str:
    """The text of region ``name`` in ``package`` (default: shardbook).

    Raises ``RegionError`` if there is none."""
    found = regions(package)
    if name not in found:
        import difflib

        near = difflib.get_close_matches(name, list(found), n=3)
        hint = f" Did you mean {', '.join(near)}?" if near else ""
        raise RegionError(
            f"no source region named {name!r} in shardbook.{hint} Mark one "
            "with '# region: NAME' ... '# endregion'."
        )
    return found[name].text


def show(*names: str, title: str | None = None):
    """The regions ``names`` as one Markdown code block, each headed by its file."""
    from IPython.display import Markdown

    if not names:
        raise RegionError("show() needs at least one region name")
    parts = []
    for name in names:
        text = region(name)
        parts.append(f"# {regions()[name].path}\n{text}")
    head = f"**{title}**\n\n" if title else ""
    return Markdown(head + "```python\n" + "\n\n".join(parts) + "\n```")
