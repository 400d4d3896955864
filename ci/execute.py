"""Execute one notebook in a fresh kernel, in place, the way ci/regenerate needs it.

Outputs are stored exactly as produced.  Per-cell execution metadata (timestamps) is
dropped so that a re-run changes the file only where an output changed.  The notebook
is read and written by ci/notebooks.py, as nbformat writes it.
"""
import json
import sys
from pathlib import Path

import nbformat
import notebooks as nbs
from nbclient import NotebookClient

path = Path(sys.argv[1])
# nbformat.reads joins the sources stored as lists of lines (nbclient needs strings)
nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
client = NotebookClient(nb, timeout=1800, kernel_name="python3",
                        startup_timeout=nbs.kernel_start_s(),   # as ./ci/test's
                        resources={"metadata": {"path": str(path.parent)}})
client.execute()
for cell in nb.cells:
    cell.metadata.pop("execution", None)
nb.metadata.pop("widgets", None)
nbformat.validate(nb)
nbs.save(path, json.loads(nbformat.writes(nb)))   # sources as lists of lines again
