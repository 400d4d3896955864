"""Tests of shardbook.coba (the COBA-HH network of chapter 4) and lab/coba_sweep.py.

conftest.py starts JAX with 4 simulated CPU devices.  The network here is small (672 E +
168 I neurons, scale 0.2) so that the whole file runs in well under a minute on 2 cores.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pyrun  # tests/pyrun.py
import pytest
from coba_sweep import validate_scaling  # lab/coba_sweep.py
from jax.sharding import PartitionSpec as P

import brainpy.math as bm

from shardbook import coba, expect, shards
from shardbook.hlo import Program

ROOT = Path(__file__).resolve().parent.parent
N = jax.device_count()
SCALE = 0.2  # 672 + 168 neurons: both divide by 1, 2, 3, 4, 6, 7 and 8
STEPS = 300


def comm_output(net, name: str):
    """One projection's synaptic input for an all-ones spike vector, computed under
    ``jit``.

    Its sharding says where the work happened: split along ``neuron`` when each device
    computed its own postsynaptic neurons, replicated when every device computed all of
    them.
    """
    proj = net.projections[name]
    ones = np.ones(proj.comm.shape[0], bool)
    if net.replicated is not None:
        ones = jax.device_put(ones, net.replicated)
    return bm.jit(lambda x: proj.comm(x))(ones)


@pytest.fixture(scope="module")
def nets():
    return {k: coba.build(jax.devices()[:k], scale=SCALE, conn="index") for k in (1, N)}


@pytest.fixture(scope="module")
def initial(nets):  # taken before any test runs the networks
    return {
        k: {name: np.asarray(a) for name, (c, a) in coba.net_arrays(net).items()}
        for k, net in nets.items()
    }


@pytest.fixture(scope="module")
def runs(nets, initial):
    out = {}
    for k, net in nets.items():
        sim = coba.Simulation(net, record=("spike", "V"))
        sim.raw = sim.run(STEPS)  # on the devices, for the layout check
        out[k] = (sim, {name: np.asarray(a) for name, a in sim.raw.items()})
    return out


@pytest.fixture(scope="module")
def unrecorded(nets, initial):  # record=(): what the ledger and collectives read
    return {k: coba.Simulation(net, record=()).compile(5) for k, net in nets.items()}


@pytest.fixture(scope="module")
def event_runs(runs):  # the event CSR at 1 and N devices, STEPS steps of spikes
    out = {}
    for k in sorted({1, N}):
        net = coba.build(jax.devices()[:k], scale=SCALE, conn="event")
        sim = coba.Simulation(net, record=("spike",))
        out[k] = (net, sim, sim.run(STEPS))
    return out


def test_sizes_and_prediction_arithmetic():
    assert coba.sizes(1) == (3360, 840) and coba.sizes(0.2) == (672, 168)
    p = coba.predict(3360, 840, 8)
    assert p["state"] == 24 * 4200 // 8 and p["delays"] == 4200 // 8
    assert p["connectivity"] == 4 * 80 * 4200 // 8
    assert p["arguments"] == p["state"] + p["delays"] + p["connectivity"]
    assert (
        coba.predict(3360, 840, 8, "csr")["connectivity"]
        == coba.predict(3360, 840, 1, "csr")["connectivity"]
    )
    assert coba.predict(3360, 840, 8, "jit")["connectivity"] == 0
    assert coba.conn_bytes_total(3360, 840, "mask") == 4200**2
    # more devices, fewer bytes per device; more neurons, more bytes
    assert coba.fit_bytes_per_device(10**6, 8) < coba.fit_bytes_per_device(10**6, 1)
    assert coba.fit_bytes_per_device(2 * 10**6, 1) > coba.fit_bytes_per_device(10**6, 1)


def test_rate_functions_stay_finite_where_the_naive_formula_is_0_over_0():
    hh = coba.HH(jnp.full(3, coba.El))
    V = jnp.array(
        [coba.VT + 13.0, coba.VT + 40.0, coba.VT + 15.0], jnp.float32
    )  # the three 0/0 points
    z = jnp.zeros(3, jnp.float32)
    assert np.isfinite(np.asarray(hh.dm(z, 0.0, V))).all()
    assert np.isfinite(np.asarray(hh.dn(z, 0.0, V))).all()
    x = 13.0 - V[0] + coba.VT
    assert not np.isfinite(
        np.asarray(0.32 * x / (jnp.exp(x / 4.0) - 1.0))
    )  # what exprel avoids


def test_every_array_is_split_along_neurons(nets):
    net = nets[N]
    for name, (cat, arr) in coba.net_arrays(net).items():
        spec = P(None, coba.NEURON) if cat == "connectivity" else P(coba.NEURON)
        shards.check_sharding(arr, spec)
        if N > 1:
            assert not shards.is_replicated(arr), name


def test_without_mesh_the_sharding_check_fails():
    if N == 1:
        pytest.skip("one device: every layout is trivially the same")
    net = coba.build(None, scale=SCALE)
    mesh = jax.sharding.Mesh(np.array(jax.devices()), [coba.NEURON])
    with pytest.raises(AssertionError):
        shards.check_sharding(net.E.V, P(coba.NEURON), mesh)


def test_sharded_run_is_bit_identical_to_one_device(runs):
    (_, ref), (sim, out) = runs[1], runs[N]
    for name in ref:
        np.testing.assert_array_equal(out[name], ref[name], err_msg=name)
    assert 5 < coba.rate_hz(ref["E.spike"]) < 100
    assert np.isfinite(ref["E.V"]).all()
    shards.check_sharding(sim.raw["E.spike"], P(None, coba.NEURON))


def test_random_numbers_do_not_depend_on_the_mesh(initial):
    ref = {
        k: np.asarray(a)
        for k, (c, a) in coba.net_arrays(
            coba.build(None, scale=SCALE, conn="index")
        ).items()
    }
    for got in initial.values():
        assert set(got) == set(ref)
        for name, arr in got.items():
            np.testing.assert_array_equal(arr, ref[name], err_msg=name)


def test_ledger_matches_shards_and_memory_analysis(nets, runs, unrecorded):
    n_exc, n_inh = coba.sizes(SCALE)
    for k, net in nets.items():
        pred = coba.predict(n_exc, n_inh, k)
        got = coba.measured_bytes(net)
        for cat in ("state", "delays", "connectivity"):
            assert got[cat] == pred[cat], (k, cat)
        stats = coba.compiled_stats(unrecorded[k])
        assert stats["arguments"] == pred["arguments"] and stats["constants"] == 0
        # the peak includes the temporaries (XLA's own peak on the CPU leaves them out)
        assert stats["peak"] == (
            stats["arguments"]
            + stats["outputs"]
            + stats["temporaries"]
            - stats["aliased"]
        )
        tol = coba.peak_tolerance(pred["temporaries"])
        assert abs(stats["peak"] - pred["peak"]) <= tol, (stats, pred, tol)
        # planted: a model that forgets the temporaries misses by more than its slack
        bare = pred["peak"] - pred["temporaries"]
        assert abs(stats["peak"] - bare) > coba.peak_tolerance(0), (k, stats, pred)


def test_closure_constant_is_baked_whole_into_every_program():
    n_exc, n_inh = coba.sizes(SCALE)
    trap = coba.build(jax.devices(), scale=SCALE, as_variable=False)
    assert trap.conn_kind == "index"  # the trap is the index matrix's
    stats = coba.compiled_stats(coba.Simulation(trap, record=()).compile(5))
    assert stats["constants"] == coba.conn_bytes_total(
        n_exc, n_inh
    )  # all of it, not 1/N
    assert (
        stats["arguments"]
        == coba.predict(n_exc, n_inh, N)["arguments"]
        - coba.predict(n_exc, n_inh, N)["connectivity"]
    )


def test_collectives_per_step(nets, unrecorded):
    n_exc, n_inh = coba.sizes(SCALE)
    net = nets[N]
    prog = Program(unrecorded[N])  # recording nothing: the step's own collectives
    print(expect.check("coba.step", prog, exc=n_exc, inh=n_inh))
    if N == 1:
        return
    rate = Program(coba.Simulation(net, record=("rate",)).compile(5))
    assert rate.counts(per_step=True)["all-reduce"] >= 1
    sliced = coba.build(jax.devices(), scale=SCALE, layout="sliced")
    sliced_prog = Program(coba.Simulation(sliced, record=("spike",)).compile(5))
    assert sliced_prog.counts(per_step=True)["collective-permute"] >= 1


@pytest.mark.parametrize("kind", ["mask", "csr"])
def test_other_representations_store_the_same_graph(kind, runs):
    ref = runs[N][1]
    net = coba.build(jax.devices(), scale=SCALE, conn=kind)
    out = coba.Simulation(net, record=("spike",)).run(STEPS)
    for name in ("E.spike", "I.spike"):
        np.testing.assert_array_equal(np.asarray(out[name]), ref[name], err_msg=name)
    if (
        N > 1
    ):  # the mask is split with the neurons; CSR computes everything on every device
        assert shards.is_replicated(comm_output(net, "E2E")) == (kind == "csr")


def test_jit_connectivity_holds_nothing_and_computes_everywhere():
    net = coba.build(jax.devices(), scale=SCALE, conn="jit")
    assert coba.measured_bytes(net)["connectivity"] == 0
    assert shards.is_replicated(comm_output(net, "E2E"))


def test_statistics():
    s = np.zeros((1000, 2), bool)
    s[::100, 0] = True  # 10 spikes in 100 ms: 100 Hz, perfectly regular
    s[[0, 10, 300, 310, 600], 1] = True
    assert coba.rate_hz(s[:, :1]) == pytest.approx(100.0)
    assert coba.cv_isi(s[:, :1]) == pytest.approx(0.0)
    assert coba.cv_isi(s[:, 1:]) > 0.5
    assert coba.population_rate(s[:, :1], bin_ms=10).shape == (10,)


def _sweep(tmp_path, out, *extra):
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "BOOK_NUM_DEVICES": "1",
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [
        sys.executable,
        str(ROOT / "lab" / "coba_sweep.py"),
        "--scales",
        "0.05",
        "0.1",
        "--out",
        str(out),
        "--time-budget",
        "5",
        "--sim-ms",
        "10",
        "--chunk-ms",
        "5",
        "--in-process",
        *extra,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )


def test_sweep_cli_writes_a_valid_data_file(tmp_path):
    out = tmp_path / "coba_scaling_cpu.json"
    res = _sweep(tmp_path, out)
    assert res.returncode == 0, res.stdout + res.stderr
    data = validate_scaling(json.loads(out.read_text()))
    assert (
        data["provenance"]["simulated"] is True
        and data["provenance"]["device_kind"] == "cpu"
    )
    assert data["provenance"]["command"].startswith(
        "python lab/coba_sweep.py --scales 0.05 0.1"
    )
    assert [r["neurons"] for r in data["runs"]] == [210, 420]
    for r in data["runs"]:
        assert r["conn_bytes_per_device"] == 4 * 80 * r["neurons"] and r["rate_hz"] >= 0
    # the check rejects a file without provenance
    del data["provenance"]["versions"]["brainevent"]
    with pytest.raises(ValueError, match="versions.brainevent"):
        validate_scaling(data)


def test_sweep_refuses_cpu_numbers_under_book(tmp_path):
    out = ROOT / "book" / "data" / "coba_scaling_test_should_not_exist.json"
    try:
        res = _sweep(tmp_path, out)
        assert res.returncode == 2 and "refusing" in res.stderr
        assert not out.exists()
    finally:
        if out.exists():
            out.unlink()


def test_simplified_jaxpr_constants_flag_also_fixes_the_trap():
    """Chapter 4 says JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1 turns the closure constant
    into a sharded argument."""
    script = (
        "from shardbook import setup_devices; setup_devices(verbose=False)\n"
        "import jax; from shardbook import coba\n"
        "trap = coba.build(jax.devices(), scale=0.2, as_variable=False)\n"
        "s = coba.compiled_stats(coba.Simulation(trap, record=()).compile(5))\n"
        "p = coba.predict(*coba.sizes(0.2), 2)\n"
        "assert s['constants'] == 0 and s['arguments'] == p['arguments'], (s, p)\n"
        "print('ok')\n"
    )
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "BOOK_NUM_DEVICES": "2",
        "JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS": "1",
    }
    res = pyrun.python("-c", script, env=env, timeout=600)
    assert res.returncode == 0 and "ok" in res.stdout, res.stdout + res.stderr[-3000:]


def test_event_csr_gives_the_index_spikes_on_any_mesh(runs, event_runs):
    """The per-device CSR holds the index matrix's graph: the same spikes, bit for
    bit."""
    ref = runs[1][1]
    n_exc, n_inh = coba.sizes(SCALE)
    for k in sorted({1, N}):
        net, _, out = event_runs[k]
        for name in ("E.spike", "I.spike"):
            np.testing.assert_array_equal(
                np.asarray(out[name]), ref[name], err_msg=f"{name}, {k}"
            )
        got = coba.measured_bytes(net)["connectivity"]
        want = coba.event_bytes(n_exc, n_inh, k)
        assert got == want["total"]  # indices 1/k, row pointers whole on every device
        assert want["indices"] * k == 4 * 80 * (n_exc + n_inh)
    assert ref["E.spike"].sum() > 100  # the comparison saw spikes


def test_event_csr_keeps_two_all_gathers_and_splits_the_work(event_runs):
    net, sim, _ = event_runs[N]
    prog = Program(sim.compiled[STEPS])  # its spike record adds no collective
    print(expect.check("coba.step", prog, exc=net.n_exc, inh=net.n_inh))
    if N > 1:
        assert not shards.is_replicated(comm_output(net, "E2E"))


def test_event_delivery_handles_bursts_in_chunks():
    """More events than one chunk: the while loop takes several chunks and drops
    none."""
    sources = jax.random.randint(jax.random.PRNGKey(1), (7, 12), 0, 30, dtype=jnp.int32)
    indptr, indices = coba.local_csr(sources, 30)
    spikes = jnp.ones(30, bool)
    count = coba.deliver(
        spikes, indptr, indices, n_local=12, chunk=5
    )  # 84 events, 17 chunks
    np.testing.assert_array_equal(np.asarray(count), np.full(12, 7.0))
    some = jnp.arange(30) % 3 == 0
    want = np.asarray(some)[np.asarray(sources)].sum(axis=0)
    got = coba.deliver(some, indptr, indices, n_local=12, chunk=4)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_bernoulli_graph_is_the_benchmarks_and_shards():
    sizes = (672, 168)
    nets = {
        k: coba.build(
            jax.devices()[:k],
            graph="bernoulli",
            start="random",
            sizes=sizes,
            conn="index",
        )
        for k in sorted({1, N})
    }
    src = np.asarray(nets[1].E2E.comm.conn.value)
    degree = (src < 672).sum(axis=0)
    assert abs(degree.mean() - 0.02 * 672) < 1.5  # p = 0.02: 13.4 inputs on average
    assert degree.std() > 2  # not a fixed in-degree
    g_i = np.asarray(nets[1].I2E.syn.g.value)
    assert (
        abs(g_i.mean() - coba.GI0_MEAN) < 20 and g_i.std() > 60
    )  # the randomised start
    outs = {
        k: coba.Simulation(net, record=("spike",)).run(100) for k, net in nets.items()
    }
    for name in ("E.spike", "I.spike"):
        np.testing.assert_array_equal(
            np.asarray(outs[N][name]), np.asarray(outs[1][name])
        )
    assert np.asarray(outs[1]["E.spike"]).sum() > 0


def test_rows_graph_ledger_matches_shards_and_memory_analysis():
    n_exc, n_inh = coba.sizes(SCALE)
    net = coba.build(
        jax.devices(), scale=SCALE, conn="event", graph="rows", start="random"
    )
    sim = coba.Simulation(net, record=("count",))
    pred = coba.predict(n_exc, n_inh, N, "event", graph="rows", counters=True)
    got = coba.measured_bytes(net)
    for cat in ("state", "delays", "connectivity"):
        assert got[cat] == pred[cat], cat
    assert coba.compiled_stats(sim.compile(5))["arguments"] == pred["arguments"]
    sim.run(5)
    # one int32 counter per neuron, split like the neurons
    assert {k: (c.value.shape, c.value.dtype) for k, c in sim.counts.items()} == {
        "E": ((n_exc,), jnp.int32), "I": ((n_inh,), jnp.int32)}
    for k, c in sim.counts.items():
        assert c.value.sharding == net.populations[k].spike.value.sharding, k
    with pytest.raises(ValueError, match="event"):
        coba.build(jax.devices(), scale=SCALE, conn="index", graph="rows")


def test_regime_statistics_tell_poisson_from_synchrony():
    rng = np.random.default_rng(0)
    poisson = rng.random((20000, 200)) < 0.003  # 30 Hz, independent
    stats = coba.regime(poisson)
    assert stats["rate"] == pytest.approx(30, rel=0.05)
    assert stats["fano"] == pytest.approx(1, abs=0.2) and stats["cv"] == pytest.approx(
        1, abs=0.1
    )
    sync = np.zeros((20000, 200), bool)
    sync[::333] = True  # everyone fires together at 30 Hz
    assert coba.regime(sync)["fano"] > 50 and coba.regime(sync)["cv"] < 0.05


def test_model_bytes_says_what_does_not_shrink():
    rows = {
        k: dict(
            (item, b)
            for item, b, _ in coba.model_bytes(
                10**6, k, conn="event", weights=True, delay_steps=15
            )
        )
        for k in (1, 8)
    }
    fixed = [
        item
        for item, _, shrinks in coba.model_bytes(10**6, 1, conn="event")
        if not shrinks
    ]
    assert fixed == [
        "row pointers (int32, 2 per source)",
        "gathered spikes, D steps (bool)",
    ]
    assert (
        rows[8]["gathered spikes, D steps (bool)"]
        == rows[1]["gathered spikes, D steps (bool)"]
    )
    assert (
        rows[8]["synapse ids (int32)"] * 8
        == rows[1]["synapse ids (int32)"]
        == 320 * 10**6
    )
    with pytest.raises(ValueError):
        coba.model_bytes(10, 1, conn="mask")
