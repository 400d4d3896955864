"""shardbook.multiprocess: the launcher and the worker of chapter 5a, on a tiny task.

The processes are real (jax.distributed on 127.0.0.1), the model is tiny so that the
test takes seconds: 2 processes x 2 simulated CPU devices, hidden size 8.
"""

import json
import os
import socket
import subprocess
import time

import multiprocess_nets as nets  # tests/multiprocess_nets.py: the networks' worker
import numpy as np
import pytest

from shardbook import book, child, cluster, coba, multiprocess as mp, rnn, verify

TINY = dict(num_in=4, hidden=8, num_out=2, batch=4, time=5, steps=2)


def test_the_task_is_chapter_5a_configuration():
    assert mp.DEFAULTS == book.config("ch5a", 8).asdict()  # 2 processes x 4 devices
    assert book.config("ch5a", 9).hidden % 9 == 0  # launch(3, 3) divides


def test_free_port_is_loopback_and_free():
    port = mp.free_port()
    with socket.socket() as s:
        s.bind((mp.LOOPBACK, port))  # nobody holds it


def test_child_env(monkeypatch):
    monkeypatch.setenv(
        "XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_dump_to=x"
    )
    monkeypatch.setenv("BOOK_NUM_DEVICES", "8")
    env = mp.child_env()
    assert env["JAX_PLATFORMS"] == "cpu"
    assert env["XLA_FLAGS"] == "--xla_dump_to=x"
    assert "BOOK_NUM_DEVICES" not in env


COBA_TINY = dict(coba_steps=40, coba_scale=0.5)  # 1,680 E + 420 I: 2 x 2 devices
# 840 neurons on 2 processes x 2 devices; 50 ms (past the opening transient of the
# randomised start), then a window of spikes and V compared with one process of 4
# devices, a checkpoint, and as many steps more (the window's program again, not a
# new compile).  "rows" is drawn per device block: 4 devices.
GRAPHS = [
    dict(
        name="bernoulli",
        build=dict(sizes=[672, 168], graph="bernoulli", start="random"),
        skip=500,
        window=50,
        after=50,
        checkpoint=True,
    ),
    dict(
        name="rows",
        build=dict(scale=0.2, graph="rows", conn="push", start="random"),
        skip=500,
        window=50,
        after=50,
        checkpoint=True,
    ),
]
# the "rows" network again, process 1 drawing its part from seed + 1 (a planted bug):
# the same shapes as "rows", only other numbers (each Simulation compiles its own step)
SHIFTED = dict(GRAPHS[1], name="rows-shifted", shift_process=1, checkpoint=False)


def test_skipped_steps_are_whole_windows(monkeypatch):
    assert [nets.skip_chunks(g) for g in GRAPHS] == [10, 10]
    assert nets.skip_chunks(dict(window=50)) == 0
    with pytest.raises(ValueError, match="skip=120 is not a multiple of window=50"):
        nets.skip_chunks(dict(name="x", skip=120, window=50))
    with pytest.raises(ValueError, match="window=0; record at least one step"):
        nets.skip_chunks(dict(name="x", skip=100, window=0))
    started = []
    monkeypatch.setattr(child, "start", lambda *a, **k: started.append(a))
    with pytest.raises(ValueError, match="'late'"):  # before any worker starts
        nets.start([dict(name="late", skip=75, window=50)])
    assert not started


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One launch, 2 processes x 2 devices, for every test of this file that needs
    one: the page's worker (the tiny RNN, the small COBA-HH network), and this file's
    networks (tests/multiprocess_nets.py: every graph of chapter 4 with a checkpoint,
    and the planted seed shift)."""
    out = tmp_path_factory.mktemp("rasters")
    reports = nets.start(
        [*GRAPHS, SHIFTED],
        num_processes=2,
        devices_per_process=2,
        timeout_s=900,
        coba_out_dir=str(out),
        **TINY,
        **COBA_TINY,
    ).result()
    return reports, out


def test_two_processes_match_one_process(both):
    reports, _ = both
    assert [r["process_index"] for r in reports] == [0, 1]
    r0, r1 = reports
    # one global mesh of 4 devices, 2 of them in each process
    assert (
        r0["global_devices"] == r1["global_devices"] and len(r0["global_devices"]) == 4
    )
    assert set(r0["local_devices"]).isdisjoint(r1["local_devices"])
    assert r0["losses"] == r1["losses"]  # a replicated scalar: the same bits everywhere
    for r in reports:   # the loss: the same value on each device of both processes
        assert len(r["loss_shards"]) == 2 and set(r["loss_shards"]) == {r["losses"][-1]}
    for r in reports:
        w = r["wrec"]
        assert (
            w["global_shards"],
            w["addressable_shards"],
            w["is_fully_addressable"],
        ) == (4, 2, False)
        assert w["spec"] == "P(None, 'hidden')"
        assert r["fetch_error"].startswith(
            "RuntimeError: Fetching value for `jax.Array` that spans"
        )
        assert r["mesh_2d"] == {"host": 2, "hidden": 2}
        assert r["fetch_error_2d"] is None  # a full replica in every process: readable
        assert set(r["wrec_bytes_1d"].values()) == {8 * 8 * 4 // 4}
        assert set(r["wrec_bytes_2d"].values()) == {8 * 8 * 4 // 2}
    cols = sorted(s["columns"] for r in reports for s in r["wrec"]["local"])
    assert cols == ["0:2", "2:4", "4:6", "6:8"]

    # the same run in this process (4 devices, see conftest.py)
    import brainpy.math as bm

    RNN, make_task, make_train_step = (
        rnn.RNN,
        rnn.make_task,
        rnn.make_train_step,
    )
    c = {**book.config("ch5a", 4).asdict(), **TINY}  # 2 processes x 2 devices
    with bm.sharding.device_mesh(np.array(book.devices()), ["hidden"]):
        model = RNN(c["num_in"], c["hidden"], c["num_out"], c["batch"], seed=c["seed"])
    step = make_train_step(model, c["lr"])
    xs, ys = make_task(c["batch"], c["time"], c["num_in"], c["num_out"], seed=c["seed"])
    ref = [float(step(xs, ys)) for _ in range(c["steps"])]
    verify.close("test.ch5a.rnn.losses", r0["losses"], ref, rtol=1e-5, atol=0)
    for r in reports:  # process_allgather gave every process the whole W_out
        np.testing.assert_allclose(
            np.array(r["wout_gathered"]), np.asarray(model.wout.value), atol=1e-6
        )


def test_failure_is_reported_and_all_processes_stop():
    # 7 hidden units cannot be split over 4 devices: both workers fail after joining
    t0 = time.monotonic()
    with pytest.raises(
        RuntimeError, match=r"process \d failed .*\n(.*\n)*.*(Indivisible|divid)"
    ):
        mp.launch(
            num_processes=2,
            devices_per_process=2,
            timeout_s=120,
            **dict(TINY, hidden=7),
        )
    assert time.monotonic() - t0 < 100


def test_timeout_kills_every_process(monkeypatch):
    started = []
    real_popen = subprocess.Popen

    def spy(*a, **k):
        p = real_popen(*a, **k)
        started.append(p)
        return p

    monkeypatch.setattr(subprocess, "Popen", spy)  # shardbook.child starts them
    with pytest.raises(TimeoutError, match="all were killed"):
        mp.launch(num_processes=2, devices_per_process=2, timeout_s=0.5, **TINY)
    assert len(started) == 2 and all(p.poll() is not None for p in started)
    for p in started:  # killed by signal, not finished
        assert p.returncode < 0
    assert not any(os.path.exists(f"/proc/{p.pid}") and _alive(p.pid) for p in started)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


# -- the COBA-HH network across processes (chapter 5a) --------------------------------
def _rasters(reports, out):
    rasters = {}
    for r in reports:
        p = r["process_index"]
        for pop in ("E", "I"):
            n = r[f"coba_{pop}"]["shape"][1]
            packed = np.load(out / f"p{p}_{pop}.npy")
            rasters[f"{pop}{p}"] = np.unpackbits(packed, axis=-1, count=n).astype(bool)
    return rasters


def _coba_reference(devices, scale, steps):

    from shardbook import coba
    net = coba.build(devices, scale=scale, seed=0)
    out = coba.Simulation(net, record=("spike",)).run(steps)
    return {
        f"{pop}{p}": np.asarray(out[f"{pop}.spike"])
        for pop in ("E", "I")
        for p in (0, 1)
    }


def test_coba_two_processes_bit_identical(both):
    import jax

    reports, out = both
    reference = _coba_reference(
        jax.devices(), COBA_TINY["coba_scale"], COBA_TINY["coba_steps"]
    )
    assert all(x.any() for x in reference.values()), "a silent network proves nothing"
    verify.identical("test.ch5a.coba.spikes", _rasters(reports, out), reference)
    for pop in ("E", "I"):
        parts = [r[f"coba_{pop}"] for r in reports]
        assert all(
            q["rate_fully_replicated"] and not q["is_fully_addressable"] for q in parts
        )
        assert sum(q["local_spikes"] for q in parts) == parts[0]["total_spikes"]
        assert parts[0]["total_spikes"] == int(reference[f"{pop}0"].sum())
        steps, n = parts[0]["shape"]
        assert [q["local_bytes"] for q in parts] == [steps * n // 2] * 2
        assert parts[0]["gathered_bytes"] == steps * n


def test_coba_shifted_seed_on_one_process_is_caught(both):
    """Process 1 draws its part of the "rows" network from seed + 1 (a planted bug):
    the gathered window is not the one-process window."""

    reports, out = both
    spec = SHIFTED
    net, ref = _window(spec)
    for r in reports:
        with pytest.raises(AssertionError, match="NOT bit-identical"):
            verify.identical(
                "test.ch5a.coba.spikes-shifted",
                _saved(out, spec["name"], r["process_index"]),
                ref,
            )
        assert r["coba_nets"][spec["name"]]["fingerprint"] != coba.fingerprint(net)


# -- every graph of chapter 4 across processes, and a checkpoint between them ----------
def _saved(out, prefix, process):
    return {
        var: np.load(out / f"{prefix}_p{process}_{var}.npy") for var in ("spike", "V")
    }


def _both(out, net):
    return {
        var: np.concatenate(
            [np.asarray(out[f"{p}.{var}"]) for p in net.populations], axis=1
        )
        for var in ("spike", "V")
    }


_REFS = {}


def _window(spec):
    """The network of ``spec`` on 1 process x 4 devices, and what every process saved
    of it, run here: ``skip`` steps, then ``window`` steps of spikes and V
    (multiprocess_nets.coba_networks_part).  Built and run once per build: SHIFTED
    shares "rows"."""
    from shardbook import book

    key = json.dumps([spec["build"], spec["skip"], spec["window"]], sort_keys=True)
    if key not in _REFS:
        net = coba.build(book.devices()[:4], **spec["build"])
        sim = coba.Simulation(net, record=("spike", "V"))
        for _ in range(nets.skip_chunks(spec)):  # as the workers skip
            sim.run(spec["window"])
        assert sim.t == spec["skip"]
        _REFS[key] = net, _both(sim.run(spec["window"]), net)
    return _REFS[key]


@pytest.mark.parametrize("spec", GRAPHS, ids=[g["name"] for g in GRAPHS])
def test_every_graph_across_two_processes_equals_one_process(both, spec):

    reports, out = both
    net, ref = _window(spec)
    assert spec["skip"] * coba.DT >= 50 and ref["spike"].sum() > 50
    name = spec["name"]
    for r in reports:
        verify.identical(
            f"test.ch5a.coba.{name}",
            _saved(out, name, r["process_index"]),
            ref,
            what=f"{name}: 2 processes x 2 devices vs 1 x 4, spikes and V",
        )
        here = r["coba_nets"][name]
        assert here["fingerprint"] == coba.fingerprint(net)  # read from each part
        assert here["in_degree"] == {
            k: dict(v) for k, v in coba.in_degree(net).items()
        }


def test_a_two_process_checkpoint_restores_in_one_process(both):
    from shardbook import book
    from shardbook.coba import checkpoint as ck
    reports, out = both
    for spec in GRAPHS:
        name = spec["name"]
        path = out / f"{name}_ckpt"
        meta = ck.read(path)
        assert meta["processes"] == 2 and meta["step"] == spec["skip"] + spec["window"]
        after = _saved(out, f"{name}_after", 0)
        assert after["spike"].any(), "a silent continuation proves nothing"
        for k in (2,) if name == "bernoulli" else (4,):  # 2: test_coba_checkpoint too
            sim = ck.restore(path, book.devices()[:k], record=("spike", "V"))
            verify.identical(
                f"test.ch5b.coba.{name}-{k}",
                _both(sim.run(spec["after"]), sim.net),
                after,
                what=f"{name}: saved by 2 processes, restored on 1 x {k}",
            )
    with pytest.raises(coba.checkpoint.CheckpointMismatch, match="device count"):
        ck.restore(out / "rows_ckpt", book.devices()[:2])


# -- the failures a cluster brings (chapter 5c), reproduced with bounded times -----
def test_a_rank_that_never_starts_ends_the_others_at_the_initialization_timeout():

    got = cluster.missing_rank(initialization_timeout=3, timeout_s=90)
    assert got["returncode"] == -6  # SIGABRT: JAX's fatal error, no
    text = "\n".join(got["stderr"])  # Python exception to catch
    assert "DEADLINE_EXCEEDED" in text and "RegisterTask" in text
    assert 3 <= got["seconds"] < 60


def test_a_dead_rank_ends_the_survivor_after_the_heartbeat_timeout():

    got = cluster.dead_rank(heartbeat_timeout=4, kill_after_steps=5, timeout_s=120)
    assert got["killed_returncode"] == -9 and got["survivor_steps"] == 5
    # on CPU the next Gloo collective fails at once (the peer's socket is gone) ...
    assert "Gloo" in got["survivor_error"] and got["survivor_error_s_after_kill"] < 3
    # ... and the process ends only when the coordination service misses the
    # heartbeats, in the shutdown barrier: SIGABRT, never a clean exit
    assert got["survivor_returncode"] == -6 and not got["survivor_finished"]
    assert "heartbeat timeout" in "\n".join(got["survivor_stderr"])
    assert got["survivor_ended_s_after_kill"] < 4 + 30


def test_a_shared_compilation_cache_is_written_by_process_0_and_hit_on_rerun():

    first, second = cluster.compilation_cache()["runs"]
    assert all(r["returncode"] == 0 for r in first["ranks"] + second["ranks"])
    (r0, r1), (s0, s1) = first["ranks"], second["ranks"]
    assert r0["requests"] == r1["requests"] == 2
    assert r0["written"] == 2 and not r1["written"] and len(first["files"]) == 2
    assert s0["hits"] == 2 and second["files"] == first["files"]  # nothing new
    assert not s1["hits"]  # CPU: the key keeps the device assignment (see cluster.py)
