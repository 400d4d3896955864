"""How a page reads: words of prose, mean sentence length, and words kept off the path.

  python ci/prose.py [PAGE ...]      default: the quick start and the core chapters

The prose of a page is the text of its Markdown cells (or of a ``.md`` page) without
code blocks, inline code, math, link targets, HTML comments and MyST directive lines.
Sentences are split at ``.``, ``!`` and ``?`` followed by a space, and at paragraph,
heading and list breaks.  The words kept off the path are looked for in inline code
and link targets as well.  The reader's-path limits (issue 37) are checked by
``tests/test_prose.py``: at most ``MAX_WORDS`` words, a mean of at most
``MAX_MEAN`` words a sentence, none of ``INTERNALS``, and at most ``MAX_VALIDATION``
mentions in all of ``VALIDATION_WORDS``.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import notebooks as nbs

ROOT = nbs.ROOT
MAX_WORDS = 3500
MAX_MEAN = 15.0
MAX_VALIDATION = 5
# compiler internals that belong to the deep-dive pages and chapter 6, not the path
INTERNALS = ("xla/", ".cc", "Combiner", "Thunk", "HloCostAnalysis", "buffer assignment",
             "ReduceScatterCreator", "AllReduceContiguous", "WhileLoop")
# the validation voice: derivations belong to the validation appendix
VALIDATION_WORDS = ("tolerance", "margin", "rtol", "atol", "nbval", "tests/")
# the reader's path, in reading order (quick start first)
PATH_PAGES = ("book/00-quick-start.ipynb", "book/01-devices-and-shards.ipynb",
              "book/02-data-parallelism.ipynb", "book/03a-hidden-split.ipynb",
              "book/04a-same-network.ipynb")

FENCE = re.compile(r"(```|~~~).*?\1", re.S)
_MATH_BLOCK = re.compile(r"\$\$.*?\$\$", re.S)
_MATH = re.compile(r"\$[^$\n]+\$")
_CODE = re.compile(r"`[^`\n]*`")
_TARGET = re.compile(r"^\s*\([\w.:-]+\)=\s*$")   # a MyST target, (label)=
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_REF_ROLE = re.compile(r"\{[a-z]+\}")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_HTML = re.compile(r"<[^>]+>")
_BREAK = re.compile(r"\n\s*\n|\n\s*(?:[-*+]|\d+\.)\s+|\n\s*#+\s+|\n\s*\|")
_SENTENCE = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
# abbreviations whose full stop ends no sentence
_ABBREV = re.compile(r"\b(e\.g|i\.e|etc|vs|cf|al|Fig|Eq|Sec|approx|No)\.", re.I)
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’\-.,/%×]*")


def markdown_of(path: Path) -> str:
    """The Markdown text of a page: its Markdown cells, or the file itself."""
    path = Path(path)
    if path.suffix == ".md":
        return path.read_text(encoding="utf-8")
    cells = nbs.load(path).get("cells", [])
    return "\n\n".join(nbs.source(c) for c in cells if c.get("cell_type") == "markdown")


def prose_of(markdown: str) -> str:
    """Markdown with code, math, link targets, comments and directives taken out."""
    text = _COMMENT.sub(" ", markdown)
    text = FENCE.sub("\n\n", text)
    text = _MATH_BLOCK.sub(" ", text)
    text = "\n".join(line for line in text.splitlines()
                     if not line.lstrip().startswith((":::", "```", "+++"))
                     and not _TARGET.match(line))
    text = _CODE.sub(" ", text)
    text = _MATH.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _REF_ROLE.sub("", text)
    return _HTML.sub(" ", text)


def sentences(prose: str) -> list[list[str]]:
    """The sentences of ``prose``, each as its words; empty pieces dropped."""
    out = []
    prose = _ABBREV.sub(lambda m: m.group(1).replace(".", ""), prose)
    for block in _BREAK.split("\n" + prose):
        for piece in _SENTENCE.split(block):
            words = _WORD.findall(piece)
            if words:
                out.append(words)
    return out


@dataclass
class Reading:
    path: str
    words: int
    sentences: int
    internals: dict[str, int]
    validation: dict[str, int]

    @property
    def mean(self) -> float:
        return self.words / max(self.sentences, 1)

    @property
    def validation_total(self) -> int:
        return sum(self.validation.values())

    def problems(self) -> list[str]:
        out = []
        if self.words > MAX_WORDS:
            out.append(f"{self.words} words of prose (at most {MAX_WORDS})")
        if self.mean > MAX_MEAN:
            out.append(f"{self.mean:.1f} words a sentence (at most {MAX_MEAN:g})")
        for term, k in self.internals.items():
            out.append(f"names {term!r} {k} time(s): link to chapter 6 instead")
        if self.validation_total > MAX_VALIDATION:
            out.append(f"{self.validation_total} mentions of {VALIDATION_WORDS} "
                       f"(at most {MAX_VALIDATION}): {self.validation}")
        return out


def read(path: Path) -> Reading:
    markdown = markdown_of(path)
    found = sentences(prose_of(markdown))
    # the words kept off the path are looked for in inline code and links too
    looked = FENCE.sub(" ", _COMMENT.sub(" ", markdown))
    lower = looked.lower()
    internals = {t: looked.count(t) for t in INTERNALS if t in looked}
    validation = {t: lower.count(t) for t in VALIDATION_WORDS if t in lower}
    return Reading(str(path), sum(map(len, found)), len(found), internals, validation)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", type=Path)
    args = ap.parse_args(argv)
    pages = args.pages or [ROOT / p for p in PATH_PAGES if (ROOT / p).exists()]
    bad = 0
    for page in pages:
        r = read(page)
        print(f"{Path(r.path).name}: {r.words} words, {r.sentences} sentences, "
              f"mean {r.mean:.1f}; validation words {r.validation_total}")
        for p in r.problems():
            print(f"   - {p}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
