"""./ci/test runs a notebook once more only when all its failures are differing
outputs (ci/junit.py): an exception or a timeout is never rerun away.  The JUnit XML
here is nbval's own, from planted notebooks, so a change of nbval's messages fails."""

import subprocess
import sys

import junit  # ci/junit.py: conftest.py puts ci/ on the path
import nbformat


def _notebook(path, *cells):
    """A notebook of (source, stored stdout) code cells, as if executed."""
    nb = nbformat.v4.new_notebook()
    for i, (source, stored) in enumerate(cells, 1):
        cell = nbformat.v4.new_code_cell(source, execution_count=i)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)]
        nb.cells.append(cell)
    nbformat.write(nb, path)


def _run(tmp_path, *names):
    xml = tmp_path / "notebooks.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--nbval", "--nbval-current-env", f"--junitxml={xml}", *names],
                   cwd=tmp_path, capture_output=True, timeout=300)
    return xml


def test_only_a_notebook_with_differing_outputs_alone_is_rerun(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    _notebook(book / "ok.ipynb", ("print(1)", "1\n"))
    _notebook(book / "differs.ipynb", ("print(1)", "2\n"), ("print(3)", "3\n"))
    _notebook(book / "raises.ipynb", ("print(1)", "2\n"), ("1 / 0", ""))
    xml = _run(tmp_path, "book/ok.ipynb", "book/differs.ipynb")
    runs = junit.notebooks(xml)
    assert runs["book/ok.ipynb"].passed and runs["book/differs.ipynb"].cells == 2
    assert junit.rerun(xml) == ["book/differs.ipynb"]
    # an exception anywhere: no rerun, for that notebook nor for any other
    xml = _run(tmp_path, "book/differs.ipynb", "book/raises.ipynb")
    assert not junit.output_only(junit.notebooks(xml)["book/raises.ipynb"])
    assert junit.rerun(xml) is None
    assert junit.rerun(_run(tmp_path, "book/ok.ipynb")) is None  # nothing failed


def test_a_rerun_replaces_the_first_result(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    _notebook(book / "a.ipynb", ("print(1)", "2\n"))
    first = _run(tmp_path, "book/a.ipynb")
    again = first.rename(tmp_path / "first.xml")
    _notebook(book / "a.ipynb", ("print(1)", "1\n"))
    second = _run(tmp_path, "book/a.ipynb")
    assert not junit.notebooks(again)["book/a.ipynb"].passed
    assert junit.notebooks(again, second)["book/a.ipynb"].passed
