"""The cluster launch recipes in recipes/: syntax, SLURM directives, and a fake-cluster
run.

CI cannot run SLURM or MPI.  It can check that the scripts parse, that the #SBATCH
block is one SLURM accepts and JAX's SLURM detection expects, that JAX 0.10.2 really
reads the environment variables the recipes' comments name, and it can run
recipes/train_rnn.py in two processes on this machine with the environment that srun
would set (on CPU, loopback only).
"""

import functools
import os
import py_compile
import re
import subprocess
import sys
from pathlib import Path

import netwatch
import pyrun  # tests/pyrun.py
import pytest
from netwatch import check_loopback_only

from shardbook import multiprocess, private, rnn, verify

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
SBATCH = RECIPES / "slurm_gpu.sbatch"
MPIRUN = RECIPES / "mpirun_gpu.sh"
TRAIN = RECIPES / "train_rnn.py"
SHELL_SCRIPTS = [SBATCH, MPIRUN]


def _load_train_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_rnn_recipe", TRAIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # safe: main() runs only under __main__
    return mod


# -- syntax ---------------------------------------------------------------------------
@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shell_syntax(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_python_entry_point_compiles(tmp_path):
    py_compile.compile(str(TRAIN), cfile=str(tmp_path / "train_rnn.pyc"), doraise=True)


@pytest.mark.parametrize("path", SHELL_SCRIPTS + [TRAIN], ids=lambda p: p.name)
def test_header_and_executable(path):
    text = path.read_text()
    assert text.startswith("#!"), "needs a shebang line"
    # a header that says what the file is and how to run it (there is no README)
    if path.suffix == ".py":
        import ast

        header = ast.get_docstring(ast.parse(text)) or ""
    else:
        header = "\n".join(ln for ln in text.splitlines()[1:] if ln.startswith("# "))
    assert "chapter 5a" in header and re.search(
        r"\b(sbatch|mpirun_gpu\.sh) ", header
    ), "start with a header explaining what the file does and how to run it"
    assert os.access(path, os.X_OK), f"{path.name} should be executable (chmod +x)"


# -- SLURM directives
# --------------------------------------------------------------------
def _sbatch_directives(text):
    """(options dict, index of first command line); SLURM stops reading #SBATCH
    there."""
    opts, first_cmd = {}, None
    for i, line in enumerate(text.splitlines()):
        s = line.strip()
        if i == 0 or not s:
            continue
        if s.startswith("#SBATCH"):
            assert first_cmd is None, (
                f"#SBATCH on line {i + 1} comes after a command: SLURM ignores it"
            )
            m = re.fullmatch(r"#SBATCH\s+--([a-z][a-z-]*)(?:=(\S+))?", s)
            assert m, f"malformed directive on line {i + 1}: {s!r}"
            opts[m.group(1)] = m.group(2)
        elif not s.startswith("#") and first_cmd is None:
            first_cmd = i
    return opts, first_cmd


def test_sbatch_directives():
    opts, first_cmd = _sbatch_directives(SBATCH.read_text())
    assert first_cmd is not None
    for key in ("nodes", "ntasks-per-node", "gpus-per-node", "time"):
        assert key in opts, f"missing #SBATCH --{key}"
    assert int(opts["nodes"]) >= 2
    # JAX's SLURM detection: one process per GPU, each seeing all GPUs of its node
    assert opts["ntasks-per-node"] == opts["gpus-per-node"]
    assert "gpus-per-task" not in opts and "gpu-bind" not in opts
    assert re.fullmatch(r"\d{1,2}:\d{2}:\d{2}|\d+-\d{1,2}:\d{2}:\d{2}", opts["time"])


def test_sbatch_launches_train_rnn_with_srun():
    text = SBATCH.read_text()
    for entry in ("train_rnn", "run_coba"):
        assert re.search(rf"^\s*srun\b.*recipes/{entry}\.py", text, re.M), (
            f"launch {entry}.py with srun"
        )
    assert not re.search(r"^[^#]*CUDA_VISIBLE_DEVICES=", text, re.M), (
        "every task must see all GPUs"
    )


def test_mpirun_script():
    text = MPIRUN.read_text()
    assert re.search(r"^mpirun\b", text, re.M)
    assert "recipes/train_rnn.py" in text
    assert "-x JAX_COORDINATOR_ADDRESS" in text, (
        "Open MPI 5 needs the coordinator exported"
    )
    assert "ppr:${GPUS_PER_NODE}:node" in text, "one process per GPU on every node"


# -- what JAX 0.10.2 detects (the recipes' comments must be true)
# -------------------------
def _detect(monkeypatch, env):

    return private.detect_cluster(env)


CLUSTERS = {
    # SLURM: any one variable missing and it is not detected
    "slurm": (
        dict(SLURM_JOB_ID="4242", SLURM_STEP_NODELIST="gpu[017-020]", SLURM_NTASKS="16",
             SLURM_PROCID="13", SLURM_LOCALID="1"),
        f"gpu017:{61440 + 4242 % 4096}", (16, 13, [1]), "SLURM_LOCALID",
    ),
    # Open MPI 5 (PRRTE) sets the ranks but not OMPI_MCA_orte_hnp_uri: JAX 0.10.2
    # misses it
    "open mpi 4": (
        dict(OMPI_MCA_orte_hnp_uri="1531576320.0;tcp://10.96.0.1,10.148.0.1:34911",
             OMPI_COMM_WORLD_SIZE="8", OMPI_COMM_WORLD_RANK="5",
             OMPI_COMM_WORLD_LOCAL_RANK="1"),
        f"10.96.0.1:{61440 + (1531576320 // 4096) % 4096}", (8, 5, [1]),
        "OMPI_MCA_orte_hnp_uri",
    ),
}


@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_jax_detects_the_cluster(monkeypatch, cluster):
    env, want_addr, want, missing = CLUSTERS[cluster]
    addr, n, pid, local = _detect(monkeypatch, dict(env))
    assert addr == want_addr
    assert (n, pid, list(local)) == want
    env = {k: v for k, v in env.items() if k != missing}
    assert _detect(monkeypatch, env) == (None, None, None, None)


def test_initialize_kwargs():
    initialize_kwargs = _load_train_module().initialize_kwargs
    slurm = dict(
        SLURM_JOB_ID="1",
        SLURM_STEP_NODELIST="n1",
        SLURM_NTASKS="2",
        SLURM_PROCID="0",
        SLURM_LOCALID="0",
    )
    ompi4 = dict(
        OMPI_MCA_orte_hnp_uri="1.0;tcp://10.0.0.1:1",
        OMPI_COMM_WORLD_SIZE="8",
        OMPI_COMM_WORLD_RANK="5",
        OMPI_COMM_WORLD_LOCAL_RANK="1",
    )
    ompi5 = dict(ompi4, JAX_COORDINATOR_ADDRESS="gpu017:61234")
    del ompi5["OMPI_MCA_orte_hnp_uri"]
    assert initialize_kwargs(slurm) == {}
    assert initialize_kwargs(ompi4) == {}
    assert initialize_kwargs(ompi5) == dict(
        coordinator_address="gpu017:61234",
        num_processes=8,
        process_id=5,
        local_device_ids=[1],
    )


# -- a fake SLURM step on this machine
# ----------------------------------------------------
def test_train_rnn_under_fake_slurm(tmp_path):
    """Two processes x 2 CPU devices, with the variables srun sets, on 127.0.0.1
    only."""

    port = multiprocess.free_port()
    ckpt = tmp_path / "ckpt"
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "OMPI_", "BOOK_NUM_DEVICES"))
    }
    base.update(
        JAX_PLATFORMS="cpu",
        JAX_NUM_CPU_DEVICES="2",
        SLURM_JOB_ID="7",
        SLURM_STEP_NODELIST="127.0.0.1",
        SLURM_NTASKS="2",
        JAX_COORDINATOR_PORT=str(port),
        JAX_COORDINATOR_BIND_ADDRESS=f"127.0.0.1:{port}",
    )
    args = [
        sys.executable,
        str(TRAIN),
        "--hidden",
        "8",
        "--batch",
        "4",
        "--time",
        "5",
        "--steps",
        "2",
        "--checkpoint-dir",
        str(ckpt),
    ]
    procs = [
        subprocess.Popen(
            args,
            env=dict(base, SLURM_PROCID=str(i), SLURM_LOCALID=str(i)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for i in range(2)
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err[-3000:]
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert "2 processes, 4 devices (2 per process, cpu)" in outs[0]
    losses = [float(x) for x in re.findall(r"loss (\S+)", outs[0])]
    assert len(losses) == 2
    assert "loss" not in outs[1], "only process 0 prints"
    assert (
        sorted(os.listdir(ckpt)) == ["2"]
        and (ckpt / "2" / "commit_success.txt").exists()
    )

    # the same training in this process, on its 4 devices, gives the same losses
    import jax
    import numpy as np

    import brainpy.math as bm


    RNN, make_task, make_train_step = (
        rnn.RNN, rnn.make_task, rnn.make_train_step
    )

    with bm.sharding.device_mesh(np.array(jax.devices()), ["hidden"]):
        model = RNN(8, 8, 8, 4, seed=0)
    step = make_train_step(model, 1e-3)
    xs, ys = make_task(4, 5, 8, 8, seed=0)
    ref = [float(step(xs, ys)) for _ in range(2)]
    np.testing.assert_allclose(losses, ref, rtol=1e-5)  # printed with 6 decimals


# -- a real MPI launch: 2 MPICH ranks on this machine, loopback only
# ----------------------
MPI_LOOPBACK = RECIPES / "mpirun_cpu_loopback.sh"
RUN_COBA = RECIPES / "run_coba.py"


def test_new_recipes_parse(tmp_path):
    r = subprocess.run(
        ["bash", "-n", str(MPI_LOOPBACK)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    py_compile.compile(
        str(RUN_COBA), cfile=str(tmp_path / "run_coba.pyc"), doraise=True
    )
    for path in (MPI_LOOPBACK, RUN_COBA):
        assert os.access(path, os.X_OK), f"{path.name} should be executable"
    # root is allowed only where the comment explains it, never in a cluster recipe
    for path in (SBATCH, MPIRUN):
        assert "allow-run-as-root" not in path.read_text()
        assert "ALLOW_RUN_AS_ROOT" not in path.read_text()


def test_run_coba_initialize_kwargs():
    kw = _load(RUN_COBA).initialize_kwargs
    assert kw(dict(SLURM_JOB_ID="1", SLURM_NTASKS="2")) == {}
    assert (
        kw(
            dict(
                OMPI_MCA_orte_hnp_uri="1.0;tcp://10.0.0.1:1",
                OMPI_COMM_WORLD_SIZE="2",
                OMPI_COMM_WORLD_RANK="1",
                OMPI_COMM_WORLD_LOCAL_RANK="1",
            )
        )
        == {}
    )
    # (launcher's environment, what initialize gets): OpenMPI 5, then MPICH
    cases = [
        (dict(OMPI_COMM_WORLD_SIZE="8", OMPI_COMM_WORLD_RANK="5",
              OMPI_COMM_WORLD_LOCAL_RANK="1", JAX_COORDINATOR_ADDRESS="n1:1234"),
         dict(coordinator_address="n1:1234", num_processes=8, process_id=5,
              local_device_ids=[1])),
        (dict(PMI_SIZE="2", PMI_RANK="1", JAX_COORDINATOR_ADDRESS="127.0.0.1:9",
              JAX_COORDINATOR_BIND_ADDRESS="127.0.0.1:9"),
         dict(coordinator_address="127.0.0.1:9", num_processes=2, process_id=1,
              coordinator_bind_address="127.0.0.1:9")),
    ]
    for env, expected in cases:
        assert kw(env) == expected


def _load(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem + "_recipe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def one_process_coba(scale: float, steps: int) -> dict:
    """The recipe's network (seed 0) run in this process on 2 of its devices: the
    spike raster of each population, as numpy.  Cached: test_slurm.py's srun run
    (the same network, 2 ranks x 1 device) compares with the same reference, so a
    session that runs both computes it once; the arrays are read-only."""
    import jax
    import numpy as np

    from shardbook import coba
    net = coba.build(jax.devices()[:2], scale=scale, seed=0)
    out = coba.Simulation(net, record=("spike",)).run(steps)
    ref = {pop: np.asarray(out[f"{pop}.spike"]).copy() for pop in ("E", "I")}
    for x in ref.values():
        x.flags.writeable = False
    return ref


def test_mpirun_two_ranks_coba_on_loopback_equals_one_process(tmp_path):
    """mpiexec.gforker (MPICH, PyPI) runs COBA-HH in 2 ranks x 1 CPU device.

    While it runs, every listening socket of every process of the launch is on
    loopback (and the JAX coordinator is among them, so the check is not vacuous);
    the spike rasters that the ranks write equal this process's run bit for bit.
    """

    child_env, free_port = multiprocess.child_env, multiprocess.free_port

    port = free_port()
    env = child_env(dict(BOOK_COORDINATOR_PORT=str(port), DEVICES_PER_RANK="1"))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    steps, scale = 40, 0.25  # 840 E + 210 I neurons
    log = tmp_path / "log.txt"
    rc, seen = netwatch.launch_watched(
        ["bash", str(MPI_LOOPBACK), *netwatch.coba_args(scale, steps, tmp_path)],
        cwd=ROOT,
        env=env,
        log=log,
        timeout_s=150,
        what="the MPI run",
    )
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert "2 processes, 2 devices (1 per process, cpu)" in text
    check_loopback_only(seen, port)

    # the same network in this process, on 2 of its devices
    import numpy as np

    ref = one_process_coba(scale, steps)
    ranks, whole = {}, {}
    for pop in ("E", "I"):
        reference = ref[pop]
        parts = [np.load(tmp_path / f"raster_p{p}_{pop}.npz") for p in (0, 1)]
        parts.sort(key=lambda z: int(z["first"]))
        ranks[pop] = np.concatenate([z["raster"] for z in parts], axis=1)
        whole[pop] = reference
        assert f"{pop}: {int(reference.sum())} spikes in {steps} steps" in text
    assert all(x.any() for x in whole.values())
    verify.identical("test.ch5a.mpirun.spikes", ranks, whole)


def test_jax_mpi4py_detector_under_mpiexec(tmp_path):
    """JAX's opt-in mpi4py detector works with MPICH, and names the host, not
    127.0.0.1."""
    script = tmp_path / "detect.py"
    script.write_text(
        "import json, socket, sys\n"
        "from shardbook import private\n"
        "addr, n, pid, local = private.detect_cluster({}, method='mpi4py')\n"
        "line = json.dumps(dict(addr=addr, n=n, pid=pid, host=socket.gethostname()))\n"
        # one write: lines never interleave
        "sys.stdout.write('DETECTED ' + line + '\\n')\n"
        "sys.stdout.flush()\n"
    )

    env = multiprocess.child_env(dict(FI_PROVIDER="shm"))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    r = pyrun.run(
        ["mpiexec.gforker", "-n", "2", sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    found = [json.loads(m) for m in re.findall(r"DETECTED (\{[^}]*\})", r.stdout)]
    assert sorted(d["pid"] for d in found) == [0, 1]
    assert all(d["n"] == 2 for d in found)
    # the coordinator is rank 0's host name, on a port derived from its hash: on a
    # cluster that is a real interface, so a one-machine run passes 127.0.0.1 itself
    assert len({d["addr"] for d in found}) == 1
    assert found[0]["addr"].startswith(found[0]["host"] + ":")
