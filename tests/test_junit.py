"""./ci/test runs a notebook once more only when all its failures are differing
outputs (ci/junit.py): an exception or a timeout is never rerun away.  The JUnit XML
here is nbval's own, from planted notebooks, so a change of nbval's messages fails."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import junit  # ci/junit.py: conftest.py puts ci/ on the path
import notebooks as nbs  # ci/notebooks.py
import pytest
from planted import notebook  # tests/planted.py


def _run(tmp_path, *names, flags=()):
    xml = tmp_path / "notebooks.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--nbval", "--nbval-current-env", f"--junitxml={xml}",
                    nbs.kernel_start_flag(), *flags,
                    *names], cwd=tmp_path, capture_output=True,
                   timeout=2 * nbs.kernel_start_s())   # more than the kernel's wait
    return xml


def test_only_a_notebook_with_differing_outputs_alone_is_rerun(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    notebook(book / "ok.ipynb", ("print(1)", "1\n"))
    notebook(book / "differs.ipynb", ("print(1)", "2\n"), ("print(3)", "3\n"))
    notebook(book / "raises.ipynb", ("print(1)", "2\n"), ("1 / 0", ""))
    notebook(book / "hangs.ipynb", ("print(1)", "2\n"),
              ("import time; time.sleep(60)", ""))
    xml = _run(tmp_path, *(f"book/{n}.ipynb" for n in ("ok", "differs", "raises",
                                                        "hangs")),
               flags=["--nbval-cell-timeout=2"])
    runs = junit.notebooks(xml)
    assert runs["book/ok.ipynb"].passed and runs["book/differs.ipynb"].cells == 2
    assert runs["book/differs.ipynb"].failures == [junit.MISMATCH]
    assert junit.output_only(runs["book/differs.ipynb"])
    # an exception, a timeout: not a mismatch alone, and then no notebook is rerun
    assert runs["book/raises.ipynb"].failures[1] == "Cell execution caused an exception"
    assert runs["book/hangs.ipynb"].failures[1].startswith("Timeout of 2 s")
    assert not junit.output_only(runs["book/raises.ipynb"])
    assert not junit.output_only(runs["book/hangs.ipynb"])
    assert junit.rerun(xml) is None


def test_a_notebook_is_named_by_its_path_even_with_a_dot(tmp_path):
    """The repository's conftest.py records each cell's notebook; pytest's class name
    (dots for slashes) would turn book/v1.2-x.ipynb into book/v1/2-x.ipynb.  Its only
    failure, differing outputs, is one to run again."""
    shutil.copy(Path(__file__).resolve().parents[1] / "conftest.py", tmp_path)
    (tmp_path / "book").mkdir()
    notebook(tmp_path / "book" / "v1.2-x.ipynb", ("print(1)", "2\n"))
    xml = _run(tmp_path, "book/v1.2-x.ipynb")
    assert list(junit.notebooks(xml)) == ["book/v1.2-x.ipynb"]
    assert junit.rerun(xml) == ["book/v1.2-x.ipynb"]


def _xml(path, *cases):
    """A JUnit XML file of (classname, name, failure message or None) test cases."""
    body = "".join(
        f'<testcase classname="{c}" name="{n}" time="1">'
        + (f'<failure message="{m}"/>' if m else "") + "</testcase>"
        for c, n, m in cases)
    path.write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite>'
                    "</testsuites>")
    return path


def test_nothing_is_rerun_beside_a_failure_of_no_notebook_or_a_missing_one(tmp_path):
    # as pytest writes a message: its newlines as character references
    mismatch = "Notebook cell execution failed&#10;Cell 0: Cell outputs differ&#10;"
    differs = ("book.a.ipynb", "Cell 0", mismatch)
    assert junit.rerun(_xml(tmp_path / "a.xml", differs)) == ["book/a.ipynb"]
    # a notebook that did not collect, or pytest's own error: no notebook to name
    stray = _xml(tmp_path / "b.xml", differs, ("", "book/b.ipynb", "SyntaxError"))
    assert junit.stray_failures(stray) == 1 and junit.rerun(stray) is None
    # a notebook asked for and missing from the file
    assert junit.rerun(tmp_path / "a.xml", ["book/a.ipynb", "book/b.ipynb"]) is None
    # a crashed worker: the cell that crashed is reported again by its successor
    twice = _xml(tmp_path / "c.xml", differs, ("book.a.ipynb", "Cell 0", None))
    assert junit.TWICE in junit.notebooks(twice)["book/a.ipynb"].failures
    assert junit.rerun(twice) is None


def _root_conftest():
    spec = importlib.util.spec_from_file_location(
        "root_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kernel_that_does_not_answer_is_replaced():
    """The repository's conftest.py shares the kernel's start time out over three
    kernels (a fresh ./ci/test once failed on a kernel silent for 300 s); planted: the
    first two never answer, then none does."""
    from nbval import kernel
    root = _root_conftest()
    assert kernel.start_new_kernel.retries   # installed in this very run
    tries = []

    def start(startup_timeout, kernel_name, fail_all=False, **kwargs):
        tries.append(startup_timeout)
        if fail_all or len(tries) < 3:
            kwargs["stderr"].write(b"planted: no answer")
            raise RuntimeError("Kernel didn't respond in 100 seconds")
        return "manager", "client"

    with pytest.warns(UserWarning, match=r"did not answer in 100 s \(try [12] of 3\)"):
        assert root.start_with_retries(start, 300, "k") == ("manager", "client")
    assert tries == [100, 100, 100]
    tries.clear()
    with pytest.warns(UserWarning), pytest.raises(
            RuntimeError, match="3 kernels in all; the last one's stderr: planted"):
        root.start_with_retries(start, 300, "k", fail_all=True)
    assert tries == [100, 100, 100]
