"""The hosted install (Colab, Kaggle: pip install "shardbook[hosted] @ git+...") is a
plain, non-editable wheel, built from a clean checkout.  It must carry exactly the
tracked modules and data files of shardbook/, including subpackages such as
shardbook.coba and the GPU device specs, and the measured data the pages read
(book/data, as shardbook/_data: ``shardbook.data_dir``)."""

import io
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent


def _tracked(*paths: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", *paths], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return done.stdout.split()


def test_the_wheel_carries_exactly_the_tracked_package_and_data(tmp_path):
    # a copy of what git tracks (as pip's clone of the tag): no build/ left over here
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    src = tmp_path / "src"
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}   # 3.11.4+
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(src, **safe)
    for rel in _tracked("shardbook", "book/data", "pyproject.toml"):   # this tree's
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes((ROOT / rel).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path / "dist"), str(src)],
        check=True, capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("shardbook-*.whl")
    names = {n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n}
    want = set(_tracked("shardbook"))
    want |= {"shardbook/_data/" + p.removeprefix("book/data/")
             for p in _tracked("book/data")}
    assert not want - names, f"not in the wheel: {sorted(want - names)}"
    assert not names - want, f"in the wheel, not tracked: {sorted(names - want)}"


def test_every_subpackage_is_listed():
    """pyproject.toml names its packages one by one (for the data's mapping): a new
    subpackage, or a new folder of data, must be added there, or the hosted wheel
    lacks it."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = find_packages(str(ROOT), include=["shardbook*"])
    data = {"shardbook._data"}
    places = (("shardbook", "shardbook"), ("book/data", "shardbook._data"))
    for folder, package in places:
        for sub in sorted({Path(p).parent for p in _tracked(folder)}):
            if sub != Path(folder) and not (ROOT / sub / "__init__.py").exists():
                data.add(package + "." + ".".join(sub.relative_to(folder).parts))
    assert sorted(listed["packages"]) == sorted([*found, *data])


def test_the_data_is_read_from_the_wheel_first(tmp_path):
    """A wheel installed over a checkout reads the data it carries (its tag's), and a
    checkout without one reads book/data: data_dir's code, run as if in each place."""
    import inspect

    from shardbook import book  # book.data_dir is shardbook.data_dir

    def data_dir_in(package):
        ns = {"__file__": str(package / "__init__.py"), "Path": Path}
        exec(inspect.getsource(book.data_dir), ns)
        return ns["data_dir"]()

    package = tmp_path / "shardbook"
    package.mkdir()
    assert data_dir_in(package) == tmp_path / "book" / "data"
    (package / "_data").mkdir()
    assert data_dir_in(package) == package / "_data"
    assert book.data_dir() == ROOT / "book" / "data"   # this checkout: no wheel
