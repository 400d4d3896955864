"""pytest's hooks for every run in this repository (tests/conftest.py adds the tests').

Each notebook's kernel starts with ``BOOK_NOTEBOOK`` naming its notebook, so that the
gap log of the equivalence checks (``BOOK_GAP_LOG``, ``shardbook.verify``) says which
page each row came from, whichever pytest-xdist worker ran it.  Each cell's JUnit
record names its notebook too (``ci/junit.py`` reads it).

A kernel that dies in a cell (killed for memory, say) fails that cell within seconds,
with its exit code: nbval alone would wait for its reply until the cell's timeout.  A
kernel that does not answer when it starts is replaced by another (``KERNEL_TRIES``).
"""

import os
import tempfile
import time
import warnings
from pathlib import Path
from queue import Empty

import pytest

ROOT = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before nbval starts a notebook's kernel (the setup of its first cell)."""
    path = Path(str(item.path)).resolve()
    if path.suffix == ".ipynb":
        name = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
        os.environ["BOOK_NOTEBOOK"] = name
        item.user_properties.append(("notebook", name))


POLL_S = 2.0   # how often a wait for a kernel's message checks that the kernel lives
# the nbval whose RunningKernel.get_message the patch below wraps (requirements.txt's
# pin; tests/test_versions.py keeps them equal)
NBVAL_PIN = "0.11.0"


def _fail_fast_on_a_dead_kernel():
    """Make nbval's waits for a kernel's messages poll, and raise when it has died.
    Refuses another nbval than ``NBVAL_PIN``: the wrapper relies on its internals."""
    from importlib import metadata

    try:
        from nbval.kernel import RunningKernel
    except ImportError:   # nbval not installed: nothing to watch
        return
    if metadata.version("nbval") != NBVAL_PIN:
        raise RuntimeError(
            f"conftest.py wraps nbval {NBVAL_PIN}'s RunningKernel.get_message, but "
            f"nbval {metadata.version('nbval')} is installed: check the wrapper "
            "against it, then change NBVAL_PIN with requirements.txt's pin")
    wait = RunningKernel.get_message
    if getattr(wait, "watches_kernel", False):
        return

    def get_message(self, stream, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_S if end is None else min(POLL_S, end - time.monotonic())
            try:
                return wait(self, stream, timeout=max(left, 0.0))
            except Empty:
                if end is not None and time.monotonic() >= end:
                    raise
                if not self.is_alive():
                    process = getattr(self.km.provisioner, "process", None)
                    code = process.poll() if process is not None else None
                    raise RuntimeError(
                        f"the notebook's kernel died (exit code {code}; -9 is a kill, "
                        "often for memory). Run the notebook alone to see where."
                    ) from None

    get_message.watches_kernel = True
    RunningKernel.get_message = get_message


_fail_fast_on_a_dead_kernel()


KERNEL_TRIES = 3   # kernels started, at most, for one notebook


def start_with_retries(start, startup_timeout=60, kernel_name="python", **kwargs):
    """``start`` (nbval's ``start_new_kernel``) with the start time shared out over
    ``KERNEL_TRIES`` kernels: one that has not answered in its share is shut down (by
    nbval) and another is started.  A kernel starts in seconds even on a loaded 2-core
    machine; one that had not answered in 300 s failed a fresh run of ./ci/test, so a
    silent kernel is replaced, not waited for.  Its stderr (nbval's is /dev/null) is
    kept, and said in the warning or the error."""
    per_try = startup_timeout / KERNEL_TRIES
    for attempt in range(1, KERNEL_TRIES + 1):
        log = tempfile.TemporaryFile()
        try:
            return start(startup_timeout=per_try, kernel_name=kernel_name,
                         **{**kwargs, "stderr": log})
        except RuntimeError as error:
            log.seek(0)
            tail = log.read()[-2000:].decode(errors="replace") or "(empty)"
            if attempt == KERNEL_TRIES:
                raise RuntimeError(f"{error}, {KERNEL_TRIES} kernels in all; the last "
                                   f"one's stderr: {tail}") from error
            warnings.warn(f"a notebook's kernel did not answer in {per_try:.0f} s (try "
                          f"{attempt} of {KERNEL_TRIES}): another is started. Its "
                          f"stderr: {tail}", stacklevel=2)


def _replace_a_silent_kernel():
    try:
        from nbval import kernel  # its version is checked above
    except ImportError:
        return
    start = kernel.start_new_kernel
    if getattr(start, "retries", False):
        return

    def start_new_kernel(startup_timeout=60, kernel_name="python", **kwargs):
        return start_with_retries(start, startup_timeout, kernel_name, **kwargs)

    start_new_kernel.retries = True
    kernel.start_new_kernel = start_new_kernel   # RunningKernel looks it up per call


_replace_a_silent_kernel()
