"""``ci/gpu_check --dry-run``: the GPU check's whole code path on the CPU, tiny sizes.

The dry run writes a data file of the schema a GPU run writes; ``book.gpudata.validate``
accepts it, and rejects planted bad files (a CPU run that claims a GPU, a time without
its events or its compile time, a silent window, a failed phase with no error).  The
wheel download for the device is checked as a command, never run.
"""

import copy
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardbook import book

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "ci" / "gpu_check.py"


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
    env = book.child.clean_env({"JAX_PLATFORMS": "cpu"})
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
    book.gpudata.validate(dry)
    assert dry["dry_run"] is True and dry["provenance"]["platform"] == "cpu"
    assert {k: v["status"] for k, v in dry["phases"].items()} == dict.fromkeys(
        book.gpudata.PHASES, "ok"
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
    assert dry["notebooks"][0]["status"] == "ok"
    text = json.dumps(dry)   # no machine's folders: the --out folder and the repo
    assert dry["notebooks"][0]["path"] == "<out>/tiny.ipynb"
    assert str(ROOT) not in text and "/tmp/" not in text
    assert not any(dry["errors"].values()) and not dry["timing"]["errors"]
    assert dry["provenance"]["versions"]["brainpy"] == "2.8.2"
    assert "mismatch" in dry["provenance"]


def _rejected(data, match):
    with pytest.raises(book.gpudata.GpuDataError, match=match):
        book.gpudata.validate(data)


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
    assert book.gpudata.load("h200", root=tmp_path) is None
    assert book.gpudata.note(None) == (
        "no real-GPU measurement exists yet: run ci/gpu_check on a GPU"
    )
    # a dry run's file does not belong among the book's data
    (tmp_path / "gpu_h200.json").write_text(json.dumps(dry))
    with pytest.raises(book.gpudata.GpuDataError, match="dry run"):
        book.gpudata.load("h200", root=tmp_path)
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
    data = book.gpudata.load("NVIDIA H200", root=tmp_path)
    assert book.gpudata.note(data) == (
        "measured on 1 x NVIDIA H200 (2026-12-01, commit 0123456789ab)"
    )
    assert book.gpudata.compile_lines(data)[0].startswith("step")
    assert book.gpudata.record_lines(data)[0] == "## Real-GPU measurements"
    rows = book.gpudata.coba_rows(data)  # what chapter 4b prints beside its time model
    assert rows and all(events > 0 for _, _, _, events, _ in rows)
    assert len(book.gpudata.coba_lines(data)) == 1 + len(rows)


def test_the_book_reads_the_data_through_the_doorway():
    data = book.gpu_data("h200")  # None until a GPU run wrote book/data/gpu_h200.json
    assert data is None or book.gpudata.validate(data)
    assert book.gpu_note("h200") == book.gpudata.note(data)


def test_the_prediction_file():
    pred = book.gpudata.load_prediction("h200")
    assert pred is not None, "run ci/gpu_check --predict"
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
    wanted = {f"{w}=={pins[w.replace('_', '-')]}" for w in mod.WHEELS}
    assert wanted <= set(cmd) and "brainpy==2.8.2" in wanted


def test_the_stored_gpu_run_and_its_verdicts_can_fail():
    """The committed real-GPU file (an H200 run): its compile verdict and allocator cap,
    as chapters 4b and 6 print them; a planted byte or a missing cap changes them."""
    data = book.gpu_data("h200")
    if data is None:
        pytest.skip("no real-GPU run in book/data/")
    exact, line = book.gpudata.compile_verdict(data)
    assert exact and "equal to the byte" in line
    assert book.gpudata.allocator_limit(data) > 0
    pinned_jax = data["provenance"]["pins"]["jax"]
    said = book.gpudata.mismatch_text(data)
    differs = "jax" in data["provenance"]["mismatch"]
    assert (f"(pinned {pinned_jax})" in said) == differs
    planted = copy.deepcopy(data)
    planted["provenance"]["versions"]["jax-cuda13-plugin"] = "9.9.9"
    assert "jax-cuda13-plugin 9.9.9" in book.gpudata.mismatch_text(planted)
    planted["provenance"]["dirty"] = True
    assert book.gpudata.note(planted).endswith(", tree not clean)")
    planted["provenance"]["dirty"] = False
    assert "not clean" not in book.gpudata.note(planted)
    planted = copy.deepcopy(data)
    planted["compile"][0]["measured"]["arguments"] += 4  # one float more on the GPU
    exact, line = book.gpudata.compile_verdict(planted)
    assert not exact and "NOT equal" in line
    for row in planted["memory"]:
        row.pop("bytes_limit", None)
    assert book.gpudata.allocator_limit(planted) is None
    planted["compile"] = []
    with pytest.raises(book.gpudata.GpuDataError, match="no step"):
        book.gpudata.compile_verdict(planted)


def test_a_data_file_names_no_machines_folders():
    """gpu_check replaces the repository's root and the --out folder in every string
    (tracebacks, the command line); the committed GPU files hold none."""
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    planted = {"error": ['File "/work/book/ci/gpu_check.py"', "--out /work/book/o"]}
    got = mod.scrub(planted, {"/work/book": "<repo>", "/work/book/o": "<out>"})
    assert got == {"error": ['File "<repo>/ci/gpu_check.py"', "--out <out>"]}
    absolute = re.compile(r"(/root/|/work/|/home/|/tmp/|/Users/)")
    for path in sorted(book.gpudata.DATA_DIR.rglob("gpu_*.json")):
        assert not absolute.search(path.read_text()), path
    assert absolute.search(json.dumps(planted))   # the pattern finds a planted one
