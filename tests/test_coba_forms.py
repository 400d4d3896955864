"""The benchmark's published forms as the network builds them, and what its graph is.

* NEST's start (``start="kick"``): every neuron at E_L with NEST's initial gates, and a
  Poisson kick of 300 Hz into g_e of the first 50 E neurons from 1 to 51 ms, the same
  on any mesh;
* ``COBAHH.config`` rebuilds the same network;
* the connectivity fingerprint is the same for the same graph in every representation
  and on every mesh, and differs for another graph (a planted change);
* the realised in-degree, read from each device's part.

conftest.py gives 4 simulated CPU devices.  Networks are small (840 neurons).
"""

import jax
import numpy as np
import pytest

from shardbook import book, coba

N = len(book.devices())
SMALL = (672, 168)
_NETS = {}


def net_of(k=N, **kw):
    """One network per (device count, build arguments), built once for this file."""
    key = (k, tuple(sorted(kw.items())))
    if key not in _NETS:
        _NETS[key] = coba.build(book.devices()[:k], **kw)
    return _NETS[key]


def test_nest_start_is_nests():
    net = net_of(sizes=SMALL, start="kick")
    m0, h0, n0 = coba.nest_initial_gates()
    assert h0 > 0.999 and m0 < 1e-6 and n0 < 1e-5  # NEST's State_ at E_L = -60 mV
    for pop in net.populations.values():
        np.testing.assert_array_equal(np.asarray(pop.V.value), coba.El)
        np.testing.assert_allclose(np.asarray(pop.h.value), h0, rtol=1e-6)
    for proj in net.projections.values():
        assert not np.asarray(proj.refs["syn"].g.value).any()
    kick = jax.jit(net.kick)
    steps = np.stack([np.asarray(kick(i)) for i in range(0, 600)])  # 60 ms
    assert steps.shape[1] == SMALL[0] and not steps[:, coba.KICK_NEURONS :].any()
    on = np.flatnonzero(steps.any(axis=1))
    assert on.min() >= 10 and on.max() < 510  # 1 ms <= t < 51 ms
    events = steps.sum() / coba.we  # 300 Hz x 50 ms x 50
    assert abs(events - 750) < 5 * np.sqrt(750)
    assert np.allclose(steps / coba.we, np.round(steps / coba.we))  # whole events


def test_nest_start_runs_the_same_on_any_mesh():
    outs = [
        coba.Simulation(
            net_of(k, sizes=SMALL, start="kick"), record=("spike", "V")
        ).run(250)
        for k in sorted({1, N})
    ]
    for name in outs[0]:
        np.testing.assert_array_equal(
            np.asarray(outs[-1][name]), np.asarray(outs[0][name])
        )
    e = np.asarray(outs[0]["E.spike"])
    assert e[:, : coba.KICK_NEURONS].sum() > 0 and e[:, coba.KICK_NEURONS :].sum() > 0


def test_config_rebuilds_the_same_network():
    net = net_of(sizes=SMALL, graph="bernoulli", conn="event")
    cfg = net.config
    assert cfg["graph"] == "bernoulli" and cfg["conn"] == "event" and cfg["seed"] == 0
    assert cfg["sizes"] == list(SMALL) and cfg["dt"] == coba.DT and net.devices == N
    again = coba.build(book.devices(), **cfg)
    assert coba.fingerprint(again) == coba.fingerprint(net)


def test_fingerprint_names_the_graph_not_its_storage():
    prints = {
        (conn, k): coba.fingerprint(net_of(k, scale=0.2, conn=conn))
        for conn, k in (("index", 1), ("index", N), ("event", N), ("mask", N))
    }
    assert len({p["network"] for p in prints.values()}) == 1
    other = coba.fingerprint(net_of(scale=0.2, seed=1))
    assert all(other[name] != prints["index", N][name] for name in other)  # planted


def test_rows_graph_depends_on_the_device_count():
    if N == 1:
        pytest.skip("one device: one block")
    a = coba.fingerprint(net_of(scale=0.2, graph="rows", conn="event"))
    b = coba.fingerprint(net_of(1, scale=0.2, graph="rows", conn="event"))
    assert a["network"] != b["network"]


def test_in_degree_from_each_devices_part():
    fixed = coba.in_degree(net_of(scale=0.2))
    assert fixed["E2E"]["mean"] == 64 and fixed["E2E"]["sd"] == 0
    assert fixed["I2I"]["min"] == fixed["I2I"]["max"] == 16
    assert fixed["E2I"]["synapses"] == 64 * 168 and fixed["E2I"]["neurons"] == 168
    bern = {
        conn: coba.in_degree(net_of(sizes=SMALL, conn=conn, graph="bernoulli"))
        for conn in ("index", "event")
    }
    assert bern["index"] == bern["event"]
    e2e = bern["index"]["E2E"]
    assert abs(e2e["mean"] - 0.02 * 672) < 1 and 2.5 < e2e["sd"] < 5  # Binomial(672, p)
    # the same numbers as the whole matrix read on one device
    one = net_of(1, sizes=SMALL, graph="bernoulli", conn="index")
    src = np.asarray(one.E2E.comm.conn.value)
    whole = (src < 672).sum(axis=0)
    assert e2e["mean"] == whole.mean() and np.isclose(e2e["sd"], whole.std())
    assert (e2e["min"], e2e["max"]) == (whole.min(), whole.max())
    rows = coba.in_degree(net_of(scale=0.2, graph="rows", conn="event"))
    assert abs(rows["E2E"]["mean"] - 64) < 2 and rows["E2E"]["sd"] > 5


def test_a_jit_projection_has_no_graph_to_read():
    with pytest.raises(ValueError, match="no graph"):
        coba.in_degree(net_of(scale=0.2, conn="jit"))


def test_dt_is_the_networks_whatever_was_built_last():
    """BrainPy's dt is global; ``Simulation`` traces with its own network's."""

    def v_after(net):
        coba.Simulation(net, record=()).run(20)
        return np.asarray(net.E.V.value)

    fine = coba.build(book.devices(), sizes=SMALL, start="random", dt=0.05)
    coarse = coba.build(book.devices(), sizes=SMALL, start="random")  # global dt: 0.1
    v_fine = v_after(fine)
    again = coba.build(book.devices(), sizes=SMALL, start="random", dt=0.05)
    np.testing.assert_array_equal(v_after(again), v_fine)  # global dt: 0.05 here
    v_coarse = v_after(coarse)
    np.testing.assert_array_equal(
        v_after(coba.build(book.devices(), sizes=SMALL, start="random")), v_coarse
    )
    assert not np.array_equal(v_fine, v_coarse)
    assert fine.config["dt"] == 0.05 and coarse.dt == coba.DT
