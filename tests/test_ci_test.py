"""./ci/test itself, on planted notebooks: what a contributor relies on when it fails.

* an unknown option or a bad number is refused before anything runs;
* a notebook whose outputs differ runs once more, and still fails if it differs again;
  no notebook runs again when one raises or hangs; one that passes only on its second
  run is named at the end;
* a cell that hangs fails at ``BOOK_TEST_TIMEOUT_S``, and the run goes on;
* a step that fails before the tests names itself.

The planted notebooks print, sleep or raise; they import nothing of the book's, so the
runs take seconds.  ``BOOK_NO_INSTALL=1``: the environment is this test's own.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from planted import notebook  # tests/planted.py

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def planted():
    """A folder for planted notebooks inside the repository (under _build/, which git
    ignores), where its conftest.py names each cell's notebook, as for the book's."""
    (ROOT / "_build").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="planted-", dir=ROOT / "_build"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _ci_test(*args, path_first=None, **env):
    path = [str(path_first)] if path_first else []
    path.append(str(Path(sys.executable).parent))
    env = {**os.environ, "BOOK_NO_INSTALL": "1", "BOOK_TEST_WORKERS": "1", **env,
           "PATH": os.pathsep.join([*path, os.environ["PATH"]])}
    return subprocess.run([str(ROOT / "ci" / "test"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_bad_options_are_refused_first():
    for args, env, said in ((["--bogus"], {}, "unknown option --bogus"),
                            (["--devices", "2", "--gpu"], {}, "--gpu is not a"),
                            (["--devices", "0"], {}, "usage: ./ci/test --devices N"),
                            (["--devices", "2"], {"BOOK_TEST_TIMEOUT_S": "10m"},
                             "BOOK_TEST_TIMEOUT_S=10m")):
        run = _ci_test(*args, **env)
        assert run.returncode == 2 and said in run.stderr, run.stderr
        assert "[env]" not in run.stdout   # refused before the environment


def test_differing_outputs_run_once_more_and_a_timeout_or_exception_does_not(planted):
    ok = notebook(planted / "ok.ipynb", ("print(1)", "1\n"))
    differs = notebook(planted / "differs.ipynb", ("print(1)", "2\n"))
    raises = notebook(planted / "raises.ipynb", ("1 / 0", ""))
    hangs = notebook(planted / "hangs.ipynb", ("import time; time.sleep(600)", ""),
                      ("print(1)", "1\n"))
    run = _ci_test("--portable", ok, differs)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"run once more: {Path(differs).relative_to(ROOT)}" in run.stdout
    assert "FAILED: notebooks" in run.stderr
    # a hung cell fails at BOOK_TEST_TIMEOUT_S, and the run goes on to the next notebook
    run = _ci_test("--portable", hangs, raises, differs, BOOK_TEST_TIMEOUT_S="3")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Timeout of 3 seconds exceeded" in run.stdout
    assert "ZeroDivisionError" in run.stdout and "run once more" not in run.stdout
    assert "differs.ipynb::Cell 0" in run.stdout   # the notebooks after the hang ran


def test_a_notebook_that_passes_only_on_its_second_run_is_named(planted):
    """Its stored output varies between runs: the run passes, and says so at the end."""
    mark = planted / "ran-once"
    flaky = notebook(planted / "flaky.ipynb", (
        f"import pathlib; p = pathlib.Path({str(mark)!r})\n"
        "print(2 if p.exists() else 1); p.touch()", "2\n"))
    run = _ci_test("--portable", flaky)
    assert run.returncode == 0, run.stdout + run.stderr
    said = "passed only when run a second time (a stored output that varies between"
    assert said in run.stderr and run.stderr.rstrip().endswith(
        str(Path(flaky).relative_to(ROOT))), run.stderr


def test_an_early_failure_names_its_step(tmp_path):
    """A step before the tests (here the notebook list) that fails ends the run with a
    FAILED line naming it, not silently."""
    fake = tmp_path / "python3"   # python3 on PATH, except for ci/notebooks.py
    fake.write_text(f'#!/bin/sh\n[ "$1" = ci/notebooks.py ] && exit 3\n'
                    f'exec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    run = _ci_test("--devices", "2", path_first=tmp_path)
    assert run.returncode == 3, run.stdout + run.stderr   # the step's own status
    said = "FAILED: the notebook list (ci/notebooks.py) (exit 3)"
    assert said in run.stderr, run.stderr


def test_a_kernel_that_dies_fails_its_cell_at_once(planted):
    """A kernel killed in a cell (as for memory) fails there within seconds, with its
    exit code; without the repository's conftest.py, nbval waits out the timeout."""
    dies = notebook(planted / "dies.ipynb",
                    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", ""),
                    ("print(1)", "1\n"))
    started = time.monotonic()
    run = _ci_test("--portable", dies, BOOK_TEST_TIMEOUT_S="120")
    took = time.monotonic() - started
    assert run.returncode == 1, run.stdout + run.stderr
    assert "the notebook's kernel died (exit code -9" in run.stdout, run.stdout
    assert took < 60, f"{took:.0f} s: the dead kernel was found only at the timeout"
