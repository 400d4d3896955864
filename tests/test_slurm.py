"""The SLURM recipe's entry point under a real, one-node Slurm (Debian's slurm-wlm).

``recipes/slurm_local_cluster.sh`` starts slurmctld and slurmd on this machine (root
only); ``srun -n 2`` then starts ``recipes/run_coba.py`` twice, and JAX's own SLURM
detection (no arguments to ``jax.distributed.initialize``) joins the two processes.
The spike rasters must equal this process's run bit for bit, and the JAX processes
must listen on loopback only.  Skipped, with the reason, where Slurm is not installed
or this is not root (``apt-get install slurmctld slurmd slurm-client munge``).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import background
import netwatch
import numpy as np
import pytest
from netwatch import check_loopback_only

from shardbook import multiprocess, verify

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "recipes" / "slurm_local_cluster.sh"


@pytest.fixture(autouse=True, scope="module")
def _slurm_installed():
    """Skip, with the reason, where Slurm is missing or this is not root; first wait
    for ``./ci/test``'s background install (ci/background.py), here when the first
    test of this file runs, not at collection, which would hold up the whole job."""
    if os.geteuid() != 0:   # first: ./ci/test installs Slurm only as root
        pytest.skip("needs root (slurmctld and slurmd run as root here)")
    said = background.wait_for_install()
    if shutil.which("slurmctld") is None or shutil.which("srun") is None:
        pytest.skip(
            "needs Debian's slurm-wlm (apt-get install slurmctld slurmd slurm-client "
            "munge)" + (f"; {said}" if said else "")
        )


def _rank_pids(marker: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                argv = Path(f"/proc/{d}/cmdline").read_bytes().decode().split("\0")
            except OSError:
                continue
            if (
                Path(argv[0]).name != "srun"
                and any(a.endswith("run_coba.py") for a in argv)
                and marker in argv
            ):
                pids.append(int(d))
    return pids


def test_srun_two_tasks_coba_equals_one_process(tmp_path):

    child_env, free_port = multiprocess.child_env, multiprocess.free_port

    state = tmp_path / "slurm"
    up = subprocess.run(
        ["bash", str(CLUSTER), "start", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if up.returncode:
        pytest.skip(f"a one-node Slurm did not start here: {up.stderr.strip()[-300:]}")
    try:
        port = free_port()
        out = tmp_path / "rasters"
        out.mkdir()
        env = child_env(
            dict(
                SLURM_CONF=str(state / "slurm.conf"),
                JAX_NUM_CPU_DEVICES="1",
                BOOK_GLOO_LOOPBACK="1",
                JAX_COORDINATOR_PORT=str(port),
                JAX_COORDINATOR_BIND_ADDRESS=f"127.0.0.1:{port}",
            )
        )
        steps, scale = 40, 0.25
        log = tmp_path / "srun.txt"
        srun = ["srun", "-n", "2", "--kill-on-bad-exit=1", sys.executable]
        rc, seen = netwatch.launch_watched(
            [
                *srun,
                str(ROOT / "recipes" / "run_coba.py"),
                *netwatch.coba_args(scale, steps, out),
            ],
            cwd=ROOT,
            env=env,
            log=log,
            timeout_s=200,
            what="the srun step",
            pids=lambda: _rank_pids(str(out)),
        )
        text = log.read_text()
        assert rc == 0, text[-3000:]
        assert "2 processes, 2 devices (1 per process, cpu)" in text
        check_loopback_only(seen, port)
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=60)

    # the same network in this process, on 2 of its devices: the reference of
    # test_recipes.py's mpirun run (the same scale, steps and seed), computed once
    from test_recipes import one_process_coba

    ref = one_process_coba(scale, steps)
    ranks, whole = {}, {}
    for pop in ("E", "I"):
        parts = sorted(
            (np.load(out / f"raster_p{p}_{pop}.npz") for p in (0, 1)),
            key=lambda z: int(z["first"]),
        )
        ranks[pop] = np.concatenate([z["raster"] for z in parts], axis=1)
        whole[pop] = ref[pop]
    assert all(x.any() for x in whole.values())
    verify.identical("test.ch5a.srun.spikes", ranks, whole)
