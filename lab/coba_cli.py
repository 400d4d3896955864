"""What chapter 4's measurement scripts (lab/coba_*.py) share: the command line, the
book on the path with its devices set up, and writing the JSON record.

Standard library only, so that it imports before the devices are set up.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parser(doc: str, *choices: str, out: Path | None = None) -> argparse.ArgumentParser:
    """The script's parser: ``doc``'s first paragraph as its description, a positional
    ``what`` among ``choices`` (if any), and ``--out`` (required unless ``out`` gives
    its default)."""
    ap = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if choices:
        ap.add_argument("what", choices=choices)
    ap.add_argument("--out", type=Path, required=out is None, default=out)
    return ap


def book(devices: int | str | None = None):
    """``shardbook.book`` from this checkout, its devices set up (``BOOK_NUM_DEVICES``
    defaults to ``devices`` where given)."""
    if devices is not None:
        os.environ.setdefault("BOOK_NUM_DEVICES", str(devices))
    sys.path.insert(0, str(ROOT))
    from shardbook import book

    book.setup_devices(verbose=False)
    return book


def write(path: Path, data: dict, indent: int = 1) -> None:
    """``data`` as JSON at ``path``, replaced in one step (a killed run leaves the old
    file whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent) + "\n")
    tmp.replace(path)


def save(path: Path, data: dict, message: str) -> int:
    """:func:`write`, then print ``message``; returns 0, the script's exit status."""
    write(path, data)
    print(message, flush=True)
    return 0
