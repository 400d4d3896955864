"""The book's pages on a real GPU: each under lax nbval, each with its own timeout.

``lab/gpu_check`` calls :func:`run_pages` after its other phases; this module holds the
page part of its data file, ``book/data/gpu_<device>.json``, whose readers
(:func:`executed_pages`, :func:`crossover_lines`) live with the record page, in
``ci/record.py``.  It imports neither JAX nor
BrainPy: every page runs in a fresh kernel of its own, under

    python -m pytest -p nbval.plugin --nbval-lax --nbval-current-env PAGE

with the device's own pytest plugins left unloaded (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``:
they are not the book's pins), as ``./ci/test --gpu`` runs a page.  A page's row in the
file's ``notebooks`` list says:

* ``status``: ``ok`` (every cell ran; lax nbval compares no output), ``failed`` (a
  cell raised, or the kernel never ran), ``timeout`` (stopped at its own timeout;
  ``why: budget`` when the run's budget, not the page, set that timeout) or
  ``skipped`` (``why``: not in this tree, or no budget left);
* ``wall_s``, ``timeout_s``, ``cells`` and ``failed_cells``;
* ``error``: the first error, one line (the failing cell and its exception), and
  ``error_detail``, the end of its traceback, ANSI colours removed;
* ``mode`` (``nbval-lax``), and where, when and with what the page ran: ``device``,
  ``jax``, ``date`` and ``commit``, copied from the file's provenance.

The quick start and the four core chapters run first (``PRIORITY``), then every other
notebook of ``_toc.yml`` in reading order, while the run's budget lasts.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ci"))
import notebooks as nbs  # noqa: E402  (ci/notebooks.py)
from prose import PATH_PAGES as PRIORITY  # noqa: E402  (ci/prose.py: the reader's path)
from record import MODE  # noqa: E402  (ci/record.py: the record's mode of a GPU run)

ROOT = nbs.ROOT
MIN_TIMEOUT_S = 5.0      # a page given less than this is skipped (budget)
ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*[A-Za-z]")
PASSED = re.compile(r"::(Cell \d+) (PASSED|FAILED|SKIPPED|ERROR)")


# ---------------------------------------------------------------- which pages
def default_pages(root: Path = ROOT) -> list[str]:
    """The quick start and the four core chapters, then every other notebook of
    ``_toc.yml`` in reading order (paths relative to the repository)."""
    rest = [p for p in nbs.relative(nbs.notebooks(root), root) if p not in PRIORITY]
    return [*PRIORITY, *rest]


def parse_page(spec: str) -> tuple[str, float | None]:
    """``'book/x.ipynb=90'`` -> ``('book/x.ipynb', 90.0)``; no ``=``: no timeout of
    its own (the default applies)."""
    path, sep, seconds = spec.rpartition("=")
    if sep and seconds.replace(".", "", 1).isdigit():
        return path, float(seconds)
    return spec, None


def kill_tree(pid: int) -> None:
    """SIGKILL a page's pytest and every process it started, including its kernel,
    which jupyter_client starts in a session of its own; returns once they have ended
    (or after 10 s)."""
    import psutil  # pinned in requirements.txt

    try:
        tree = psutil.Process(pid).children(recursive=True)
        os.killpg(pid, signal.SIGKILL)
    except (psutil.NoSuchProcess, ProcessLookupError):  # it has just ended
        tree = []
    for child in tree:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=10)


# ---------------------------------------------------------------- one page
def clean(text: str) -> str:
    return ANSI.sub("", text or "")


def read_junit(xml: Path) -> dict:
    """Cells, failed cells and the first failure of one page's JUnit XML."""
    root = ET.parse(xml).getroot()
    cases = list(root.iter("testcase"))
    failed = [(c, f) for c in cases for f in list(c)
              if f.tag in ("failure", "error")]
    out = dict(cells=len(cases), failed_cells=len(failed))
    if failed:
        case, fail = failed[0]
        text = clean(fail.text or fail.get("message", ""))
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        last = lines[-1] if lines else "(no message)"
        out["error"] = f"{case.get('name')}: {last}"[:400]
        out["error_detail"] = text[-1500:]
    return out


def run_page(path: str, timeout: float, env: dict, junit_dir: Path) -> dict:
    """One page under lax nbval in a fresh kernel, stopped (with its kernel) at
    ``timeout``: its row, without the provenance."""
    xml = junit_dir / (Path(path).stem + ".xml")
    xml.unlink(missing_ok=True)
    page = ROOT / path   # pytest runs in the page's folder: cells named "x.ipynb::"
    cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
           "-p", "nbval.plugin", "--nbval-lax", "--nbval-current-env",
           f"--nbval-cell-timeout={int(timeout) + 60}", nbs.kernel_start_flag(),
           f"--junitxml={xml}",
           f"--rootdir={page.parent}", page.name]
    row = dict(path=path, mode=MODE, timeout_s=round(timeout, 1))
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=page.parent, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)     # pytest, and the kernel in its own session
            proc.wait()
            rc = None
        log.seek(0)
        out = clean(log.read())
    row["wall_s"] = round(time.monotonic() - t0, 2)
    if rc is None:
        done = PASSED.findall(out)
        where = (f"after {done[-1][0]} ({len(done)} cells done)" if done
                 else "before its first cell finished")
        row.update(status="timeout", cells=len(done),
                   failed_cells=sum(s != "PASSED" for _, s in done),
                   error=f"stopped at its timeout of {timeout:.0f} s, {where}",
                   error_detail=out[-1500:])
        return row
    got = read_junit(xml) if xml.exists() else dict(cells=0, failed_cells=0)
    row.update(got)
    if rc == 0 and got["cells"] and not got["failed_cells"]:
        row["status"] = "ok"
        return row
    row["status"] = "failed"
    if "error" not in row:   # no cell failed: the kernel, pytest or nbval did
        lines = [ln for ln in out.splitlines() if ln.strip()]
        row["error"] = (f"pytest exit {rc}, no cell failed: "
                        + (lines[-1].strip() if lines else "no output"))[:400]
        row["error_detail"] = out[-1500:]
    return row


def page_env(dry: bool) -> dict:
    """A page's environment: the real accelerators on a GPU (``./ci/test --gpu``), the
    CPU in a dry run; the device's pytest plugins unloaded."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_", "BOOK_NUM_DEVICES"))}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if dry:
        env["JAX_PLATFORMS"] = "cpu"
    return env


def run_pages(specs: list[str], budget_left, default_timeout: float, dry: bool,
              log=print) -> list[dict]:
    """Every page of ``specs`` (``PATH`` or ``PATH=SECONDS``) in turn, while
    ``budget_left()`` (seconds) lasts: their rows."""
    rows = []
    env = page_env(dry)
    with tempfile.TemporaryDirectory(prefix="gpu_pages_") as junit:
        for spec in specs:
            path, own = parse_page(spec)
            full = Path(path) if Path(path).is_absolute() else ROOT / path
            if not full.is_file():
                rows.append(dict(path=path, mode=MODE, status="skipped", wall_s=0.0,
                                 timeout_s=0.0, why="not in this tree"))
                log(f"[notebooks] {path}: skipped (not in this tree)")
                continue
            want = own if own is not None else default_timeout
            left = budget_left()
            timeout = min(want, left)
            if timeout < MIN_TIMEOUT_S:
                why = f"budget: {max(left, 0):.0f} s left"
                rows.append(dict(path=path, mode=MODE, status="skipped", wall_s=0.0,
                                 timeout_s=0.0, why=why))
                log(f"[notebooks] {path}: skipped (budget)")
                continue
            row = run_page(path, timeout, dict(env, BOOK_NOTEBOOK=path), Path(junit))
            if row["status"] == "timeout" and timeout < want:
                row["why"] = "budget"
            rows.append(row)
            log(f"[notebooks] {path}: {row['status']} in {row['wall_s']:.1f} s "
                f"(timeout {timeout:.0f} s, {row.get('cells', 0)} cells)"
                + (f": {row['error']}" if row.get("error") else ""))
    return rows


def phase_record(rows: list[dict], budget_s: float, wall_s: float) -> dict:
    """The ``phases.notebooks`` record: ok, error (a page failed or timed out, named),
    or skipped (no page ran)."""
    bad = [f"{r['path']}: {r['status']}" for r in rows
           if r["status"] in ("failed", "timeout")]
    ran = [r for r in rows if r["status"] != "skipped"]
    status = "skipped" if not ran else "error" if bad else "ok"
    return dict(budget_s=round(max(budget_s, 0), 1), wall_s=round(wall_s, 2),
                status=status, **({"error": "; ".join(bad)} if bad else {}))


def stamp(rows: list[dict], prov: dict) -> list[dict]:
    """Each executed row with where, when and with what it ran (the provenance)."""
    said = dict(device=prov.get("device_kind"), jax=prov.get("versions", {}).get("jax"),
                date=prov.get("date"), commit=prov.get("commit"))
    return [dict(r, **said) if r["status"] != "skipped" else r for r in rows]


# ---------------------------------------------------------------- the crossover
def crossover(rows: list[dict], earlier: dict | None, source: str) -> dict:
    """This run's push and index times beside an earlier GPU run's (``earlier``, a
    data file's content), size by size: the faster delivery and the ratio of each
    time to the earlier one's."""
    def table(coba):
        return {(r["neurons"], r["conn"]): r["seconds_per_step"] for r in coba or []
                if "seconds_per_step" in r}

    now = table(rows)
    before = table((earlier or {}).get("timing", {}).get("coba"))
    out = dict(source=source, rows=[])
    if earlier is not None:
        p = earlier["provenance"]
        out["earlier"] = dict(device=p.get("device_kind"), date=p.get("date"),
                              commit=p.get("commit"),
                              jax=p.get("versions", {}).get("jax"))
    for n in sorted({n for n, _ in now}):
        row = dict(neurons=n)
        for when, src in (("now", now), ("earlier", before)):
            push, index = src.get((n, "push")), src.get((n, "index"))
            row[when] = dict(push_s=push, index_s=index,
                             faster=None if push is None or index is None
                             else "push" if push < index else "index")
        row["ratio"] = {c: (now[(n, c)] / before[(n, c)]
                            if (n, c) in now and before.get((n, c)) else None)
                        for c in ("push", "index")}
        out["rows"].append(row)
    return out


