"""Execute one notebook in a fresh kernel, in place, the way ci/regenerate needs it.

Outputs are stored exactly as produced.  Per-cell execution metadata (timestamps) is
dropped so that a re-run changes the file only where an output changed.  The notebook
is read and written by ci/notebooks.py, as nbformat writes it.
"""
import sys
from pathlib import Path

import nbformat
import notebooks as nbs
from nbclient import NotebookClient

path = Path(sys.argv[1])
nb = nbformat.reads(nbs.dumps(nbs.load(path)), as_version=4)   # sources as strings
client = NotebookClient(nb, timeout=1800, kernel_name="python3",
                        resources={"metadata": {"path": str(path.parent)}})
client.execute()
for cell in nb.cells:
    cell.metadata.pop("execution", None)
nb.metadata.pop("widgets", None)
nbformat.validate(nb)
nbformat.write(nb, str(path))   # sources as lists of lines, as nbformat writes them
