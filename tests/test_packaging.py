"""The hosted install (Colab, Kaggle: pip install "shardbook[hosted] @ git+...") is a
plain, non-editable wheel.  It must carry every module and data file the notebooks
import, including subpackages such as shardbook.coba and the GPU device specs, and the
measured data the pages read (book/data, as shardbook/_data: ``book.data_dir``)."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_carries_every_module_and_data_file(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("shardbook-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "shardbook").rglob("*")
        if p.suffix in (".py", ".txtpb") and "__pycache__" not in p.parts
    }
    data = ROOT / "book" / "data"
    want |= {f"shardbook/_data/{p.relative_to(data).as_posix()}"
             for p in data.rglob("*") if p.is_file()}
    missing = sorted(want - names)
    assert not missing, f"not in the wheel a hosted notebook installs: {missing}"
