"""shardbook.jax_private: every private JAX/Orbax touch point of chapter 5, version-guarded.

Each function must refuse to run on another version than the pinned one, with a message
that names the pinned version; and no other file of chapter 5 may reach into ``_src``.
"""
import json
import re
from pathlib import Path

import pytest

from shardbook import jax_private

ROOT = Path(__file__).resolve().parents[1]


def test_pins_match_requirements():
    req = (ROOT / "requirements.txt").read_text()
    assert f"jax=={jax_private.PINNED_JAX}\n" in req
    assert f"orbax-checkpoint=={jax_private.PINNED_ORBAX}\n" in req


@pytest.mark.parametrize("call", [
    lambda: jax_private.gloo_on_loopback(),
    lambda: jax_private.cluster_types(),
    lambda: jax_private.detector_variables(),
    lambda: jax_private.detect_cluster({}),
])
def test_jax_guard_names_the_pinned_version(monkeypatch, call):
    monkeypatch.setattr(jax_private, "_installed", lambda package: "9.9.9")
    with pytest.raises(jax_private.PrivateAPIError,
                       match=r"jax 0\.10\.2, the version this book pins.*9\.9\.9"):
        call()


def test_orbax_guard_names_the_pinned_version(monkeypatch):
    monkeypatch.setattr(jax_private, "_installed", lambda package: "0.0.1")
    with pytest.raises(jax_private.PrivateAPIError, match=r"orbax-checkpoint 0\.12\.8"):
        with jax_private.orbax_reads_recorded():
            pass
    assert 'version("orbax-checkpoint") ==' in jax_private.ORBAX_KILL_BEFORE_COMMIT


def test_detectors_read_what_the_book_says():
    names = [n for n, _ in jax_private.cluster_types()]
    assert names[:3] == ["OmpiCluster", "SlurmCluster", "Mpi4pyCluster"]
    found = jax_private.detector_variables()
    assert "OMPI_MCA_orte_hnp_uri" in found["Open MPI"]
    assert "SLURM_STEP_NODELIST" in found["SLURM"]


def test_no_private_imports_elsewhere_in_chapter_5():
    files = [ROOT / "shardbook" / "multiprocess.py", ROOT / "recipes" / "run_coba.py",
             ROOT / "recipes" / "train_rnn.py"]
    texts = {f.name: f.read_text() for f in files}
    for nb in ("05a-multi-process", "05b-checkpoints", "05c-troubleshooting"):
        cells = json.loads((ROOT / "book" / f"{nb}.ipynb").read_text())["cells"]
        texts[nb] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    private = re.compile(r"^\s*(from|import)\s+(jax|orbax[.\w]*)\._src", re.M)
    for name, text in texts.items():
        assert not private.search(text), f"{name} imports a private module directly"
