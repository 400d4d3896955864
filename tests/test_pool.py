"""ci/pool.py reruns a notebook job once only when its log shows differing outputs and
nothing else (ipykernel can publish a cell's last stream message after its idle status
on a loaded machine); an exception, a timeout or a failing test file is never rerun."""

import argparse
import time
from pathlib import Path

import pool  # ci/pool.py: conftest.py puts ci/ on the path
import pytest

MISMATCH = """..F..
FAILED book/01-x.ipynb::Cell 31 - Notebook cell execution failed
Cell 31: Cell outputs differ
 mismatch 'stdout'
1 failed, 27 passed in 18.71s
"""


def _job(tmp_path: Path, text: str, name="book/01-x.ipynb", is_tests=False):
    log = tmp_path / "x.log"
    log.write_text(text)
    return pool.Job(name, [], {}, 0.0, tmp_path / "x.xml", log, is_tests=is_tests)


def test_an_output_mismatch_alone_is_rerun(tmp_path):
    assert pool.only_output_mismatches(_job(tmp_path, MISMATCH))


def test_an_exception_timeout_or_test_file_is_not_rerun(tmp_path):
    exc = MISMATCH + "Cell 32: Cell execution caused an exception\n"
    assert not pool.only_output_mismatches(_job(tmp_path, exc))
    timeout = MISMATCH + "Timeout of 900 seconds exceeded executing cell\n"
    assert not pool.only_output_mismatches(_job(tmp_path, timeout))
    assert not pool.only_output_mismatches(_job(tmp_path, MISMATCH, is_tests=True))
    assert not pool.only_output_mismatches(_job(tmp_path, MISMATCH, pool.BOOK_JOB))
    assert not pool.only_output_mismatches(_job(tmp_path, "1 passed\n"))


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"  # a zombie: ended, not yet reaped
    except FileNotFoundError:
        return True


def test_a_job_over_its_timeout_is_killed_with_its_children_and_fails(tmp_path):
    """A hung notebook job: its log already reads like an output mismatch (the one
    failure that is rerun), and it has two children, one in its own process group and
    one in a session of its own, as jupyter_client starts a kernel."""
    pids, text = tmp_path / "pids", tmp_path / "mismatch.txt"
    text.write_text(MISMATCH)
    script = (f"cat {text}; sleep 60 & echo $! >> {pids}; "
              f"setsid sleep 60 & echo $! >> {pids}; wait")
    hang = pool.Job("book/01-x.ipynb", ["bash", "-c", script], {}, 0.0,
                    tmp_path / "h.xml", tmp_path / "h.log")
    quick = pool.Job("quick", ["true"], {}, 0.0, tmp_path / "q.xml", tmp_path / "q.log")
    t0 = time.monotonic()
    pool.run([hang, quick], workers=2, timeout_s=3)
    assert time.monotonic() - t0 < 30
    assert quick.status == "passed"
    assert pool.only_output_mismatches(hang)  # it would have been rerun ...
    assert hang.status.startswith("FAILED (killed after 3 s") and not hang.rerun
    assert "BOOK_JOB_TIMEOUT_S" in hang.status
    children = [int(x) for x in pids.read_text().split()]
    assert len(children) == 2, "the job had not started both children in 3 s"
    assert all(_gone(pid) for pid in children)


def test_a_bad_job_timeout_is_refused():
    for bad in ("0", "-5", "30m", "nan", "inf"):
        with pytest.raises(argparse.ArgumentTypeError, match="BOOK_JOB_TIMEOUT_S"):
            pool.positive_seconds(bad)
    assert pool.positive_seconds("900") == 900.0
