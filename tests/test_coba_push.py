"""The push delivery of chapter 4 (``coba.push``): exact, static, and loud on overflow.

conftest.py starts JAX with 4 simulated CPU devices.  Small networks (scale 0.1: 336 E
+ 84 I neurons, both divisible by 1, 2, 3, 4, 6, 7 and 12) keep the file short.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardbook import book

coba = book.coba
N = len(book.devices())
SCALE = 0.1
STEPS = 200  # 20 ms: the opening volley (steps 60-70) and after


def _run(k, **kw):
    net = coba.build(book.devices()[:k], scale=SCALE, **kw)
    sim = coba.Simulation(net, record=("spike", "V"))
    return net, {name: np.asarray(a) for name, a in sim.run(STEPS).items()}


@pytest.fixture(scope="module")
def index_run():
    return _run(1)[1]


@pytest.mark.parametrize("k", sorted({1, 2, N}))
def test_push_gives_the_index_spikes_and_voltages_on_any_mesh(k, index_run):
    net, out = _run(k, conn="push")
    assert set(out) == set(index_run)
    for name, want in index_run.items():
        np.testing.assert_array_equal(out[name], want, err_msg=f"{name}, {k} device(s)")
    assert index_run["E.spike"].sum() > 50 and index_run["I.spike"].sum() > 10
    stats = coba.push.burst_stats(net)
    assert all(dropped == 0 for dropped, _ in stats.values())
    assert stats["E"][1] > 0 and stats["E2E"][1] > 0  # it saw spikes and events


def test_the_xla_expansion_gives_the_same_network(index_run):
    """The GPU path (static event slots), forced on the CPU: identical too."""
    net, out = _run(N, conn="push", kernel="xla")
    for name, want in index_run.items():
        np.testing.assert_array_equal(out[name], want, err_msg=name)
    assert not net.E2E.comm.op.cpu_kernels


def test_the_cpu_kernels_are_used_on_a_cpu():
    net = coba.build(book.devices(), scale=SCALE, conn="push")
    text = coba.Simulation(net, record=()).compile(3).as_text()
    if coba.kernels.available():
        assert "shardbook_coba_push" in text and "shardbook_coba_compact" in text
    xla = coba.build(book.devices(), scale=SCALE, conn="push", kernel="xla")
    assert "shardbook_coba" not in coba.Simulation(xla, record=()).compile(3).as_text()


# ------------------------------------------------------------------ nothing dropped
def test_a_planted_overflow_of_the_spike_buffer_is_counted_exactly():
    x = coba.push.SpikeExchange(40, None, fraction=0.01)
    cap = x.capacity
    on = np.arange(0, 40, 3)[:cap + 2]  # two more spikes than there is room for
    spikes = jnp.zeros(40, bool).at[on].set(True)
    ids = np.asarray(x.update(spikes))  # eagerly: the counter is a BrainPy Variable
    np.testing.assert_array_equal(ids, on[:cap])  # the first ones, in order
    np.testing.assert_array_equal(np.asarray(x.counter.value), [[2, cap + 2]])
    with pytest.raises(coba.push.DeliveryOverflow, match="spike_capacity"):
        coba.push.check(type("Net", (), {"exchanges": {"E": x}, "projections": {}})())


def test_a_planted_overflow_of_the_event_slots_is_counted_exactly():
    sources = jax.random.randint(jax.random.PRNGKey(1), (7, 12), 0, 30, dtype=jnp.int32)
    indptr, indices = coba.local_csr(sources, 30)
    ids = jnp.array([0, 3, 4, 29, 30, 30], jnp.int32)  # 30: the sentinel
    want = np.isin(np.asarray(sources), [0, 3, 4, 29]).sum(axis=0)
    counts, total = coba.push.expand(ids, indptr, indices, 12, slots=200)
    np.testing.assert_array_equal(np.asarray(counts), want)
    assert int(total) == want.sum()
    short, total = coba.push.expand(ids, indptr, indices, 12, slots=int(want.sum()) - 3)
    assert int(total) == want.sum() and np.asarray(short).sum() == want.sum() - 3


@pytest.mark.parametrize("kernel", ["auto", "xla"])
def test_a_network_with_too_small_a_buffer_raises_after_the_chunk(kernel):
    net = coba.build(book.devices(), scale=SCALE, conn="push", spike_capacity=0.001,
                     kernel=kernel)
    sim = coba.Simulation(net, record=())
    with pytest.raises(coba.push.DeliveryOverflow, match="spike_capacity"):
        sim.run(STEPS)  # the opening volley does not fit 1 spike per device
    dropped = {name: d for name, (d, _) in coba.push.burst_stats(net).items()}
    assert dropped["E"] > 0


def test_capacity_arithmetic():
    assert coba.push.spike_capacity(100_000) == int(np.ceil(2500 + 6 * 50 + 1))
    assert coba.push.spike_capacity(10) == 5  # never more than the neurons, here fewer
    assert coba.push.spike_capacity(4, 1.0) == 4
    with pytest.raises(ValueError, match="fraction"):
        coba.push.spike_capacity(100, 0.0)
    with pytest.raises(ValueError, match="kernel"):
        coba.build(None, scale=SCALE, conn="push", kernel="cuda")
    with pytest.raises(ValueError, match="separate"):
        coba.build(None, scale=SCALE, conn="push", layout="sliced")


# --------------------------------------------------------------- static, no host trips
_WHILE = re.compile(r"=\s.*\swhile\(")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def unknown_trip_counts(text: str) -> list[str]:
    """The ``while`` instructions of an optimized HLO text whose trip count XLA does not
    know (``known_trip_count`` in the backend config).  A local reader until
    ``shardbook.hlo.Program.whiles`` lands."""
    return [line.split("=")[0].strip() for line in text.splitlines()
            if _WHILE.search(line) and not _TRIPS.search(line)]


def test_every_loop_of_the_push_step_has_a_known_trip_count():
    push = coba.build(book.devices(), scale=SCALE, conn="push", kernel="xla")
    text = coba.Simulation(push, record=()).compile(7).as_text()
    assert unknown_trip_counts(text) == []
    assert _TRIPS.findall(text) == ["7"]  # the time loop only
    assert "conditional(" not in text
    # the check can fail: the event CSR's delivery loops have data-dependent trip counts
    event = coba.build(book.devices(), scale=SCALE, conn="event")
    bad = unknown_trip_counts(coba.Simulation(event, record=()).compile(7).as_text())
    assert len(bad) == 4  # one per projection


def test_push_exchanges_indices_not_bools():
    net = coba.build(book.devices(), scale=SCALE, conn="push")
    compiled = coba.Simulation(net, record=()).compile(3)
    gathers = sorted(c.nbytes for c in book.hlo.collectives(compiled) if c.per_step)
    caps = [net.exchange_I.capacity, net.exchange_E.capacity]
    if N == 1:
        assert gathers == []
    else:
        assert gathers == sorted(4 * N * c for c in caps)  # int32 ids, every device's block
