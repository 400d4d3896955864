"""Planted notebooks for the tests of the test runner (ci/test, ci/junit.py)."""

import nbformat


def notebook(path, *cells):
    """A notebook of (source, stored stdout) code cells, as if executed; its path."""
    nb = nbformat.v4.new_notebook()
    for i, (source, stored) in enumerate(cells, 1):
        cell = nbformat.v4.new_code_cell(source, execution_count=i)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)]
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return str(path)
