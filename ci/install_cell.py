"""The first code cell of every notebook: one text, kept here and nowhere else.

The pages that stand alone (``notebooks.STANDALONE``, the quick start) have a device
setup of their own instead, and are left out.

  python ci/install_cell.py            check that every notebook starts with it
  python ci/install_cell.py --write    write it into every notebook's first code cell

The cell sets up the devices before JAX starts.  In a hosted runtime (Colab, Kaggle)
it first installs the book's own version of ``shardbook`` (:func:`ref`: the tag
``@v<version>`` of a release, or the branch for a development version) with the
``hosted`` extra, which pins the book's packages (plus ``cuda12`` on a GPU runtime), so
that a notebook gets the ``shardbook`` it was validated with.  The repository URL is
the one of ``_config.yml``.  Only the cell's source is written: its outputs and tags
stay.
"""
from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

import notebooks as nbs

ROOT = nbs.ROOT

TEMPLATE = '''\
# Device setup: this must run before JAX or BrainPy starts (see chapter 1).
# In Colab or Kaggle it first installs this book's own version of shardbook, with
# the book's pinned packages; elsewhere nothing.
import os
import shutil
import sys

if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    extras = "hosted,cuda12" if shutil.which("nvidia-smi") else "hosted"
    repo = "git+{repository}@{ref}"
    %pip install -q "shardbook[{{extras}}] @ {{repo}}"
from shardbook import book

# N simulated CPU devices (N = $BOOK_NUM_DEVICES, default 8), or all real GPUs/TPUs
info = book.setup_devices()'''


def repository(root: Path = ROOT) -> str:
    """The repository URL, set once in ``_config.yml``."""
    import yaml

    return yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"]


def version(root: Path = ROOT) -> str:
    """The book's version, set once in ``pyproject.toml``."""
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def ref(root: Path = ROOT) -> str:
    """The git ref a hosted notebook installs ``shardbook`` from.  A release
    (``1.2.0``) installs its tag, ``v1.2.0``, so an old notebook keeps its package.  A
    development version (``1.2.0.dev0``) installs the branch of ``_config.yml``: its
    pages and package change together there, and no tag holds them yet."""
    import yaml

    v = version(root)
    config = yaml.safe_load((root / "_config.yml").read_text())
    return config["repository"]["branch"] if ".dev" in v else f"v{v}"


def canonical(root: Path = ROOT) -> str:
    """The text of every notebook's first code cell."""
    return TEMPLATE.format(repository=repository(root), ref=ref(root))


def differs(path: Path, root: Path = ROOT) -> bool:
    return nbs.source(nbs.first_code_cell(nbs.load(path))) != canonical(root)


def write(path: Path, root: Path = ROOT) -> bool:
    """Put the canonical text into the first code cell of ``path``; True if changed."""
    nb = nbs.load(path)
    cell = nbs.first_code_cell(nb)
    want = canonical(root)
    if nbs.source(cell) == want:
        return False
    cell["source"] = want.splitlines(keepends=True)
    nbs.save(path, nb)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write it into every notebook")
    ap.add_argument("notebooks", nargs="*", type=Path)
    args = ap.parse_args(argv)
    paths = [p for p in args.notebooks if not nbs.standalone(p)] if args.notebooks \
        else nbs.helper_notebooks()
    if args.write:
        changed = [p for p in paths if write(p)]
        print(f"[install cell] wrote {len(changed)} of {len(paths)} notebooks"
              + (": " + ", ".join(p.name for p in changed) if changed else ""))
        return 0
    bad = [p for p in paths if differs(p)]
    for p in bad:
        print(f"[install cell] {p.name}: the first code cell is not the canonical one "
              "(python ci/install_cell.py --write)")
    print(f"[install cell] {'FAILED' if bad else 'passed'}: {len(paths)} notebooks")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
