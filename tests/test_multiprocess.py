"""shardbook.multiprocess: the launcher and the worker of chapter 5a, on a tiny task.

The processes are real (jax.distributed on 127.0.0.1), the model is tiny so that the
test takes seconds: 2 processes x 2 simulated CPU devices, hidden size 8.
"""
import os
import socket
import time

import numpy as np
import pytest

from shardbook import multiprocess as mp

TINY = dict(num_in=4, hidden=8, num_out=2, batch=4, time=5, steps=2)


def test_free_port_is_loopback_and_free():
    port = mp.free_port()
    with socket.socket() as s:
        s.bind((mp.LOOPBACK, port))  # nobody holds it


def test_child_env(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_dump_to=x")
    monkeypatch.setenv("BOOK_NUM_DEVICES", "8")
    env = mp.child_env()
    assert env["JAX_PLATFORMS"] == "cpu"
    assert env["XLA_FLAGS"] == "--xla_dump_to=x"
    assert "BOOK_NUM_DEVICES" not in env


def test_two_processes_match_one_process():
    reports = mp.launch(num_processes=2, devices_per_process=2, timeout_s=180, **TINY)
    assert [r["process_index"] for r in reports] == [0, 1]
    r0, r1 = reports
    # one global mesh of 4 devices, 2 of them in each process
    assert r0["global_devices"] == r1["global_devices"] and len(r0["global_devices"]) == 4
    assert set(r0["local_devices"]).isdisjoint(r1["local_devices"])
    assert r0["losses"] == r1["losses"]  # a replicated scalar: the same bits everywhere
    for r in reports:
        w = r["wrec"]
        assert (w["global_shards"], w["addressable_shards"], w["is_fully_addressable"]) == (4, 2, False)
        assert w["spec"] == "P(None, 'hidden')"
        assert r["fetch_error"].startswith("RuntimeError: Fetching value for `jax.Array` that spans")
        assert r["mesh_2d"] == {"host": 2, "hidden": 2}
        assert r["fetch_error_2d"] is None  # a full replica in every process: readable
        assert set(r["wrec_bytes_1d"].values()) == {8 * 8 * 4 // 4}
        assert set(r["wrec_bytes_2d"].values()) == {8 * 8 * 4 // 2}
    cols = sorted(s["columns"] for r in reports for s in r["wrec"]["local"])
    assert cols == ["0:2", "2:4", "4:6", "6:8"]

    # the same run in this process (4 devices, see conftest.py)
    import brainpy.math as bm
    import jax
    from shardbook.models import RNN, make_task, make_train_step

    c = {**mp.DEFAULTS, **TINY}
    with bm.sharding.device_mesh(np.array(jax.devices()), ["hidden"]):
        model = RNN(c["num_in"], c["hidden"], c["num_out"], c["batch"], seed=c["seed"])
    step = make_train_step(model, c["lr"])
    xs, ys = make_task(c["batch"], c["time"], c["num_in"], c["num_out"], seed=c["seed"])
    ref = [float(step(xs, ys)) for _ in range(c["steps"])]
    np.testing.assert_allclose(r0["losses"], ref, rtol=1e-5)
    for r in reports:  # process_allgather gave every process the whole W_out
        np.testing.assert_allclose(np.array(r["wout_gathered"]), np.asarray(model.wout.value), atol=1e-6)


def test_failure_is_reported_and_all_processes_stop():
    # 7 hidden units cannot be split over 4 devices: both workers fail after joining
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"process \d failed .*\n(.*\n)*.*(Indivisible|divid)"):
        mp.launch(num_processes=2, devices_per_process=2, timeout_s=120, **dict(TINY, hidden=7))
    assert time.monotonic() - t0 < 100


def test_timeout_kills_every_process(monkeypatch):
    started = []
    real_popen = mp.subprocess.Popen

    def spy(*a, **k):
        p = real_popen(*a, **k)
        started.append(p)
        return p

    monkeypatch.setattr(mp.subprocess, "Popen", spy)
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
