"""``lab/gpu_check --dry-run``: the GPU check's whole code path on the CPU, tiny sizes.

The dry run writes a data file of the schema a GPU run writes;
``lab/gpu_schema.validate`` accepts it, and rejects planted bad files (a CPU run that
claims a GPU, a time without its events or its compile time, a silent window, a failed
phase with no error). The pages run under lax nbval, each with its own timeout
(``lab/gpu_notebooks.py``): a dry run of small pages gives one row per page, ok, failed,
timeout or skipped, with the first error; the record page says which pages ran on which
GPU, or that none has. The wheel download for the device is checked as a command, never
run.
"""

import copy
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shardbook import child, gpudata
from shardbook.gpudata import gpu_data, gpu_note

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "lab" / "gpu_check.py"
sys.path.insert(0, str(ROOT / "ci"))
sys.path.insert(0, str(ROOT / "lab"))

import gpu_notebooks  # noqa: E402
import gpu_schema  # noqa: E402  (lab/gpu_schema.py)
import record  # noqa: E402


def _notebook(path: Path, *sources: str) -> Path:
    """A small page of code cells (nbformat 4.5, with cell ids)."""
    cells = [dict(id=f"c{i}", cell_type="code", execution_count=None, outputs=[],
                  metadata={}, source=src) for i, src in enumerate(sources)]
    path.write_text(json.dumps(dict(nbformat=4, nbformat_minor=5, metadata={},
                                    cells=cells)))
    return path


def _tiny_notebook(path: Path) -> Path:
    cell = dict(cell_type="code", execution_count=None, outputs=[], metadata={})
    nb = dict(
        nbformat=4,
        nbformat_minor=5,
        metadata={},
        cells=[
            dict(
                cell,
                source="%matplotlib inline\nif False:\n    %pip install x\n"
                "x = 6 * 7\nassert x == 42",
            ),
            dict(
                cell,
                source="raise ValueError('shown on purpose')",
                metadata={"tags": ["raises-exception"]},
            ),
            dict(cell, cell_type="markdown", source="text"),
        ],
    )
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    nb = _tiny_notebook(out / "tiny.ipynb")
    env = child.clean_env({"JAX_PLATFORMS": "cpu"})
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--dry-run",
            "--out",
            str(out),
            "--notebooks",
            str(nb),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "gpu_cpu.json").read_text())


def test_dry_run_writes_the_schema(dry):
    gpu_schema.validate(dry)
    assert dry["dry_run"] is True and dry["provenance"]["platform"] == "cpu"
    assert {k: v["status"] for k, v in dry["phases"].items()} == dict.fromkeys(
        gpu_schema.PHASES, "ok"
    )
    # every step compiled beside its prediction; one device: no collective
    assert {r["name"] for r in dry["compile"]} == {"dp", "fsdp", "coba_1_gpu"}
    assert all(r["exact"] and r["measured"]["collectives"] == 0 for r in dry["compile"])
    assert {r["model"] for r in dry["memory"]} == {"rnn.train_step", "coba.loop"}
    kinds = {r["conn"] for r in dry["timing"]["coba"]}
    assert kinds == {"push", "index"}
    assert all(r["events_per_step"] > 0 for r in dry["timing"]["coba"])
    assert dry["timing"]["coba_10s"]["published_s"] == [42.1, 56.0]
    assert dry["timing"]["rnn"][0]["seconds_per_step"] > 0
    page = dry["notebooks"][0]   # under lax nbval: both code cells, one raising
    assert page["status"] == "ok" and page["mode"] == "nbval-lax"
    assert page["cells"] == 2 and page["failed_cells"] == 0
    assert page["device"] == "cpu" and page["jax"] == "0.10.2" and page["commit"]
    # the push / index times beside the first H200 run's (none at the dry size)
    cross = dry["crossover"]
    assert cross["source"] == "<repo>/book/data/gpu_h200.json"
    assert cross["earlier"]["device"] == "NVIDIA H200"
    assert [r["neurons"] for r in cross["rows"]] == [840]
    assert cross["rows"][0]["now"]["faster"] in ("push", "index")
    assert cross["rows"][0]["earlier"]["push_s"] is None
    text = json.dumps(dry)   # no machine's folders: the --out folder and the repo
    assert dry["notebooks"][0]["path"] == "<out>/tiny.ipynb"
    assert str(ROOT) not in text and tempfile.gettempdir() + "/" not in text
    assert not any(dry["errors"].values()) and not dry["timing"]["errors"]
    assert dry["provenance"]["versions"]["brainpy"] == "2.8.2"
    assert "mismatch" in dry["provenance"]


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """``lab/gpu_check --dry-run --phases notebooks`` on four small pages: one that
    passes, one whose assert fails, one that outlives its own timeout, one missing."""
    out = tmp_path_factory.mktemp("gpu_pages")
    ok = _notebook(out / "ok.ipynb", "%matplotlib inline\nx = 6 * 7", "assert x == 42")
    bad = _notebook(out / "bad.ipynb", "x = 1", "assert 6 * 7 == 41, 'planted'",
                    "print(x)")
    slow = _notebook(out / "slow.ipynb", "import time\ntime.sleep(300)")
    env = child.clean_env({"JAX_PLATFORMS": "cpu"})
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--phases", "notebooks",
         "--suffix", "pages", "--out", str(out), "--notebooks", str(ok), str(bad),
         f"{slow}=6", str(out / "missing.ipynb")],
        env=env, capture_output=True, text=True, timeout=300)
    # a page that failed fails the command (exit 1), and the file is written
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "gpu_cpu_pages.json").read_text())


def test_every_page_has_its_row(pages):
    gpu_schema.validate(pages)
    rows = {Path(r["path"]).name: r for r in pages["notebooks"]}
    assert list(rows) == ["ok.ipynb", "bad.ipynb", "slow.ipynb", "missing.ipynb"]
    assert {k: r["status"] for k, r in rows.items()} == {
        "ok.ipynb": "ok", "bad.ipynb": "failed", "slow.ipynb": "timeout",
        "missing.ipynb": "skipped"}
    assert all(r["mode"] == "nbval-lax" for r in rows.values())
    assert rows["ok.ipynb"]["cells"] == 2 and rows["ok.ipynb"]["wall_s"] > 0
    bad = rows["bad.ipynb"]   # the first error: its cell and its exception
    assert bad["error"] == "Cell 1: AssertionError: planted"
    assert bad["cells"] == 3 and bad["failed_cells"] == 1
    assert "\x1b" not in bad["error_detail"] and "#x1B" not in bad["error_detail"]
    slow = rows["slow.ipynb"]   # stopped at its own timeout, kernel and all
    assert slow["timeout_s"] == 6 and 6 <= slow["wall_s"] < 60
    assert slow["error"].startswith("stopped at its timeout of 6 s")
    assert rows["missing.ipynb"]["why"] == "not in this tree"
    for r in (rows["ok.ipynb"], bad, slow):   # where, when and with what each ran
        assert (r["device"], r["jax"]) == ("cpu", "0.10.2") and r["date"]
    assert "device" not in rows["missing.ipynb"]
    ph = pages["phases"]
    others = ("compile", "memory", "timing")
    assert {k: ph[k]["status"] for k in others} == dict.fromkeys(others, "skipped")
    assert ph["notebooks"]["status"] == "error"
    assert "bad.ipynb: failed" in ph["notebooks"]["error"]
    assert "slow.ipynb: timeout" in ph["notebooks"]["error"]
    assert "crossover" not in pages   # no timing asked for
    assert tempfile.gettempdir() + "/" not in json.dumps(pages)
    assert str(ROOT) not in json.dumps(pages)


def test_pages_order_budget_and_timeouts(tmp_path):
    order = gpu_notebooks.default_pages()   # the quick start and the core first
    assert order[:5] == list(gpu_notebooks.PRIORITY)
    assert order[0] == "book/00-quick-start.ipynb"
    toc = [p for p in book_notebooks() if p not in gpu_notebooks.PRIORITY]
    assert order[5:] == toc and len(set(order)) == len(order)
    assert gpu_notebooks.parse_page("book/x.ipynb=90") == ("book/x.ipynb", 90.0)
    assert gpu_notebooks.parse_page("book/x.ipynb") == ("book/x.ipynb", None)
    # a page that the budget left cannot fit is skipped
    page = _notebook(tmp_path / "p.ipynb", "x = 1")
    rows = gpu_notebooks.run_pages([str(page)], lambda: 3.0, 60, True, log=len)
    assert rows[0]["status"] == "skipped" and rows[0]["why"].startswith("budget")


def book_notebooks():
    import notebooks

    return notebooks.relative(notebooks.notebooks())


def _timing(rows):
    return [dict(neurons=n, conn=c, seconds_per_step=t) for n, c, t in rows]


def test_the_crossover_beside_the_earlier_run():
    earlier = dict(provenance=dict(device_kind="NVIDIA H200", date="2026-12-04",
                                   commit="abc", versions=dict(jax="0.11.2")),
                   timing=dict(coba=_timing([(4200, "push", 7e-5),
                                             (4200, "index", 2e-5),
                                             (1_000_000, "push", 4e-4),
                                             (1_000_000, "index", 5e-4)])))
    now = _timing([(4200, "push", 14e-5), (4200, "index", 1e-5),
                   (1_000_000, "push", 6e-4), (1_000_000, "index", 5e-4)])
    got = gpu_notebooks.crossover(now, earlier, "book/data/gpu_h200.json")
    assert got["earlier"] == dict(device="NVIDIA H200", date="2026-12-04",
                                  commit="abc", jax="0.11.2")
    small, large = got["rows"]
    assert small["now"]["faster"] == small["earlier"]["faster"] == "index"
    assert large["earlier"]["faster"] == "push" and large["now"]["faster"] == "index"
    assert small["ratio"] == {"push": pytest.approx(2.0), "index": pytest.approx(0.5)}
    lines = record.crossover_lines(got)
    assert len(lines) == 3 and "1,000,000" in lines[2]
    alone = gpu_notebooks.crossover(now, None, None)   # no earlier file: said so
    assert "earlier" not in alone and alone["rows"][0]["ratio"]["push"] is None
    # the record page sets them side by side (the first H200 run had none)
    crossed = [f for f in record.data_files()
               if json.loads(f.read_text()).get("crossover")]
    assert bool(record.gpu_crossover_lines()) == bool(crossed)
    run = dict(earlier, crossover=got, dry_run=False)
    run["provenance"] = dict(earlier["provenance"], date="2026-12-06T10:00:00")
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "gpu_h200_pages.json").write_text(json.dumps(run))
        lines = record.gpu_crossover_lines(Path(folder))
    assert "(2026-12-06, JAX 0.11.2, `gpu_h200_pages.json`)" in lines[1]
    assert lines[-1] == "```" and lines[-2] == record.crossover_lines(got)[-1]
    assert lines[-2].split() == ["1,000,000", "600.0", "500.0", "index", "|",
                                 "400.0", "500.0", "push"]


def test_the_record_says_which_pages_ran_on_a_gpu(pages, tmp_path):
    # the book's data: until a GPU run's pages are committed, it says none has run
    # (the first H200 run skipped them)
    said = record.gpu_pages_lines()
    assert said[0] == f"### {record.PAGES_HEADING}"
    if not record.executed_pages()[0]:
        assert said[-1].startswith(record.NO_PAGES) and "skipped" in said[-1]
        assert record.PAGES_HEADER not in said
    else:
        assert record.PAGES_HEADER in said
    # a GPU run whose pages ran: a table, the newest run of each page
    run = copy.deepcopy(pages)
    run.update(dry_run=False)
    run["provenance"].update(platform="gpu", device_kind="NVIDIA H200",
                             date="2026-12-06T10:00:00")
    for i, row in enumerate(run["notebooks"]):
        row["path"] = ["book/01-devices-and-shards.ipynb", "book/02-data-parallelism"
                       ".ipynb", "book/03a-hidden-split.ipynb", "book/00-x.ipynb"][i]
        if row["status"] != "skipped":
            row.update(device="NVIDIA H200", jax="0.11.2", date="2026-12-06")
    (tmp_path / "gpu_h200.json").write_text(json.dumps(run))
    lines = record.gpu_pages_lines(tmp_path)
    assert record.PAGES_HEADER in lines
    table = "\n".join(lines)
    assert ("| `book/01-devices-and-shards.ipynb` | ok | " in table
            and "| NVIDIA H200 | 0.11.2 | 2026-12-06 |" in table)
    assert "| `book/02-data-parallelism.ipynb` | failed: Cell 1: AssertionError: " \
        "planted |" in table
    assert "| `book/03a-hidden-split.ipynb` | timeout: stopped at its timeout" in table
    assert "| `book/04a-same-network.ipynb` | not run on a GPU yet |" in table
    assert "00-x" not in table   # skipped: not executed
    older = copy.deepcopy(run)   # an older run of another GPU does not hide it
    older["provenance"].update(device_kind="NVIDIA H100", date="2026-12-05T10:00:00")
    for row in older["notebooks"]:
        row.update(status="ok", device="NVIDIA H100", date="2026-12-05")
    (tmp_path / "gpu_h100.json").write_text(json.dumps(older))
    table = "\n".join(record.gpu_pages_lines(tmp_path))
    assert "| `book/02-data-parallelism.ipynb` | failed" in table
    assert "| `book/00-x.ipynb` | ok |" in table and "NVIDIA H100" in table
    out = tmp_path / "record.md"   # and the whole record page carries the section
    record.write(None, out)
    assert f"### {record.PAGES_HEADING}" in out.read_text()


def _rejected(data, match):
    with pytest.raises(gpudata.GpuDataError, match=match):
        gpu_schema.validate(data)


def test_validate_rejects_planted_bad_files(dry):
    fake = copy.deepcopy(dry)
    fake["dry_run"] = False  # CPU figures passed off as a GPU run's
    _rejected(fake, "written on platform 'cpu'")
    bad = copy.deepcopy(dry)
    del bad["timing"]["coba"][0]["events_per_step"]
    _rejected(bad, r"timing.coba\[0\].events_per_step")
    bad = copy.deepcopy(dry)
    bad["timing"]["coba"][0]["events_per_step"] = 0
    _rejected(bad, "silent window")
    bad = copy.deepcopy(dry)
    bad["phases"]["timing"] = dict(status="timeout", budget_s=1, wall_s=1)
    _rejected(bad, "timeout without its error")
    bad = copy.deepcopy(dry)
    del bad["provenance"]["commit"]
    _rejected(bad, "provenance.commit")
    _rejected({"schema": "something else"}, "not a shardbook.gpu-check/1 file")


def test_load_and_note(dry, tmp_path):
    assert gpudata.load("h200", root=tmp_path) is None
    assert gpudata.note(None) == (
        "no real-GPU measurement exists yet: run lab/gpu_check on a GPU"
    )
    # a dry run's file does not belong among the book's data
    (tmp_path / "gpu_h200.json").write_text(json.dumps(dry))
    with pytest.raises(gpudata.GpuDataError, match="dry_run=True, not a real GPU"):
        gpudata.load("h200", root=tmp_path)
    as_gpu = copy.deepcopy(dry)
    as_gpu.update(dry_run=False)
    as_gpu["provenance"].update(
        platform="gpu",
        device_kind="NVIDIA H200",
        commit="0123456789abcdef",
        dirty=False,  # the dry run's tree may have had changes; this one had none
        date="2026-12-01T12:00:00",
        driver="570.124.06",
    )
    (tmp_path / "gpu_h200.json").write_text(json.dumps(as_gpu))
    empty = copy.deepcopy(as_gpu)
    empty["provenance"]["commit"] = None  # the device's copy has no .git
    _rejected(empty, "provenance.commit is empty")
    idle = copy.deepcopy(as_gpu)
    for ph in idle["phases"].values():
        ph.update(status="skipped")
    _rejected(idle, "no phase finished")
    data = gpudata.load("NVIDIA H200", root=tmp_path)
    assert gpudata.note(data) == (
        "measured on 1 x NVIDIA H200 (2026-12-01, commit 0123456789ab)"
    )
    assert gpudata.compile_lines(data)[0].startswith("step")
    rows = gpudata.coba_rows(data)  # the record page's GPU rows (ci/record.py)
    assert rows and all(events > 0 for _, _, _, events, _ in rows)
    page = record.gpu_lines()   # the record page's section: header, rule, rows
    assert page[0] == "## Real-GPU measurements" and page[2].startswith("Measured on")
    assert sum(line.startswith("| ") for line in page) == 2 + len(gpudata.coba_rows(
        gpu_data("h200")))


def test_the_book_reads_the_data_through_the_doorway():
    data = gpu_data("h200")  # None until a GPU run wrote book/data/gpu_h200.json
    assert data is None or gpu_schema.validate(data)
    assert gpu_note("h200") == gpudata.note(data)


def test_every_committed_gpu_file_is_valid():
    """The pages read these without validating them (gpudata.load): each committed file
    passes its schema's validator, and a planted fake in one of them fails it."""
    files = sorted(gpudata.DATA_DIR.rglob("gpu_*.json"))
    assert {p.name for p in files} >= {"gpu_h200.json", "gpu_target_h200.json"}
    for path in files:
        data = json.loads(path.read_text())
        if data.get("schema") == gpudata.PREDICTION_SCHEMA:
            gpu_schema.validate_prediction(data)
        else:
            gpu_schema.validate(data)
    earlier = json.loads((gpudata.DATA_DIR / "earlier" / "gpu_h200.json").read_text())
    earlier["provenance"]["platform"] = "cpu"   # a CPU run that claims a GPU
    with pytest.raises(gpudata.GpuDataError, match="written on platform 'cpu'"):
        gpu_schema.validate(earlier)


def test_the_prediction_file():
    pred = gpudata.load_prediction("h200")
    assert pred is not None, "run lab/gpu_check --predict"
    assert pred["devices"] == 1 and "H200" in pred["description"]
    assert set(pred["jobs"]) == {
        "dp",
        "hidden",
        "hidden_2d",
        "fsdp",
        "coba",
        "coba_1_gpu",
    }
    assert all(job["collectives"] == 0 for job in pred["jobs"].values())
    assert pred["jobs"]["coba_1_gpu"]["kwargs"]["neurons"] % 4200 == 0


def test_wheels_are_pinned_and_only_named(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    seen = []
    monkeypatch.setattr(
        mod.subprocess,
        "run",
        lambda cmd, **kw: seen.append(cmd) or subprocess.CompletedProcess(cmd, 0),
    )
    assert mod.main(["--wheels", str(tmp_path / "whl")]) == 0
    cmd = seen[0]
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and "--no-deps" in cmd
    pins = mod.pins()
    wanted = {f"{w}=={pins[mod.norm(w)]}" for w in (*mod.WHEELS, *mod.NB_WHEELS)}
    assert wanted <= set(cmd) and "brainpy==2.8.2" in wanted
    assert {"nbval==0.11.0", "ipykernel==7.4.0", "pyzmq==27.3.0"} <= wanted
    # the pages' runner: every package nbval and ipykernel need that the device's
    # image lacks (KINDS.md), e.g. IPython, whose absence stopped the first run's pages
    assert {"ipython", "jupyter_client", "nbformat", "tornado"} <= set(mod.NB_WHEELS)


def test_the_stored_gpu_run_and_its_verdicts_can_fail():
    """The committed real-GPU file (an H200 run): its compile verdict and allocator cap,
    as chapters 4b and 6 print them; a planted byte or a missing cap changes them."""
    data = gpu_data("h200")
    assert data is not None, "book/data/gpu_h200.json (the real-GPU run) is missing"
    exact, line = gpudata.compile_verdict(data)
    assert exact and "equal to the byte" in line
    assert gpudata.allocator_limit(data) > 0
    pinned_jax = data["provenance"]["pins"]["jax"]
    said = gpudata.mismatch_text(data)
    differs = "jax" in data["provenance"]["mismatch"]
    assert (f"(pinned {pinned_jax})" in said) == differs
    planted = copy.deepcopy(data)
    planted["provenance"]["versions"]["jax-cuda13-plugin"] = "9.9.9"
    assert "jax-cuda13-plugin 9.9.9" in gpudata.mismatch_text(planted)
    planted["provenance"]["dirty"] = True
    assert gpudata.note(planted).endswith(", tree not clean)")
    planted["provenance"]["dirty"] = False
    assert "not clean" not in gpudata.note(planted)
    planted = copy.deepcopy(data)
    planted["compile"][0]["measured"]["arguments"] += 4  # one float more on the GPU
    exact, line = gpudata.compile_verdict(planted)
    assert not exact and "NOT equal" in line
    for row in planted["memory"]:
        row.pop("bytes_limit", None)
    assert gpudata.allocator_limit(planted) is None
    planted["compile"] = []
    with pytest.raises(gpudata.GpuDataError, match="no step"):
        gpudata.compile_verdict(planted)


def test_a_data_file_names_no_machines_folders():
    """gpu_check replaces the repository's root and the --out folder in every string
    (tracebacks, the command line); the committed GPU files hold none."""
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    script, out = ROOT / "lab" / "gpu_check.py", ROOT / "o"   # this machine's folders
    planted = {"error": [f'File "{script}"', f"--out {out}"]}
    got = mod.scrub(planted, {str(ROOT): "<repo>", str(out): "<out>"})
    assert got == {"error": ['File "<repo>/lab/gpu_check.py"', "--out <out>"]}
    # any absolute folder, not a URL's path nor a placeholder's; pip's index path
    # (": /simple/NAME/" in its retry warnings) is no machine's folder
    absolute = re.compile(r"(?<![\w:/<>.~-])/[A-Za-z_][\w.-]*/(?<!/simple/)")
    for path in sorted(gpudata.DATA_DIR.rglob("gpu_*.json")):
        assert not absolute.search(path.read_text()), path
    assert absolute.search(json.dumps(planted))   # the pattern finds a planted one
    assert not absolute.search(json.dumps(got))
