"""The push delivery of chapter 4 (``coba.push``): exact, static, and loud on overflow.

conftest.py starts JAX with 4 simulated CPU devices.  Small networks (scale 0.1: 336 E
+ 84 I neurons, both divisible by 1, 2, 3, 4, 6, 7 and 12) keep the file short.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardbook import book, coba, gputarget
from shardbook.hlo import Program

N = len(book.devices())
SCALE = 0.1
STEPS = 200  # 20 ms: the opening volley (steps 60-70) and after


def _run(k, **kw):
    net = coba.build(book.devices()[:k], scale=SCALE, **kw)
    sim = coba.Simulation(net, record=("spike", "V"))
    out = {name: np.asarray(a) for name, a in sim.run(STEPS).items()}
    return net, out, sim.compiled[STEPS].as_text()


@pytest.fixture(scope="module")
def index_run():
    return _run(1)[1]


@pytest.fixture(scope="module")
def push_runs():  # (net, outputs, program text) by (devices, kernel)
    return {
        (k, kernel): _run(k, conn="push", kernel=kernel)
        for k, kernel in sorted({(1, "auto"), (N, "auto"), (N, "xla")})
    }


@pytest.mark.parametrize(
    "k, kernel", sorted({(1, "auto"), (N, "auto"), (N, "xla")})
)
def test_push_gives_the_index_spikes_and_voltages_on_any_mesh(
    k, kernel, index_run, push_runs
):
    """Spikes and V bit for bit, on 1 and 4 devices; ``kernel="xla"`` is the GPU's
    path (static event slots), forced on the CPU."""
    net, out, _ = push_runs[k, kernel]
    assert set(out) == set(index_run)
    for name, want in index_run.items():
        np.testing.assert_array_equal(out[name], want, err_msg=f"{name}, {k} device(s)")
    assert index_run["E.spike"].sum() > 50 and index_run["I.spike"].sum() > 10
    stats = coba.push.burst_stats(net)
    assert all(dropped == 0 for dropped, _ in stats.values())
    assert stats["E"][1] > 0 and stats["E2E"][1] > 0  # it saw spikes and events
    assert net.E2E.comm.op.cpu_kernels == (
        kernel == "auto" and coba.kernels.available()
    )


def test_push_on_the_benchmarks_bernoulli_graph():
    """The published form (Bernoulli p = 0.02, randomised start): padded columns."""
    # test_coba.py's Bernoulli sizes: the same generator programs, compiled once
    kw = dict(graph="bernoulli", start="random", sizes=(672, 168))
    ref = coba.Simulation(
        coba.build(book.devices()[:1], conn="index", **kw), record=("spike", "V")
    ).run(100)
    out = coba.Simulation(
        coba.build(book.devices(), conn="push", **kw), record=("spike", "V")
    ).run(100)
    for name in ref:
        np.testing.assert_array_equal(
            np.asarray(out[name]), np.asarray(ref[name]), err_msg=name
        )
    assert np.asarray(ref["E.spike"]).sum() > 0


def test_the_cpu_kernels_are_used_on_a_cpu(push_runs):
    if coba.kernels.available():
        text = push_runs[N, "auto"][2]
        assert "shardbook_coba_push" in text and "shardbook_coba_compact" in text
    assert "shardbook_coba" not in push_runs[N, "xla"][2]


def test_the_cpu_kernels_earn_their_place():
    """The numba FFI kernels stay because a reader's chapter 4 run needs them: on a
    CPU the push delivery's XLA path is several times slower (lab/coba_kernels.py
    measured it; the version guard, tests/test_once.py, falls back to that path)."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[1] / "book" / "data"
                       / "coba_kernels.json").read_text())
    assert data["schema"] == "shardbook.coba-kernels/1"
    assert {"versions", "date", "command", "machine"} <= set(data["provenance"])
    rows = {}
    for r in data["rows"]:
        rows.setdefault(r["neurons"], {})[r["variant"]] = r
    ratios = {}
    for n, by in rows.items():   # all three side by side, the same work on each side
        assert set(by) == {"push, CPU kernels", "push, XLA path", "index matrix"}, by
        assert len({round(r["events_per_step"], 3) for r in by.values()}) == 1, n
        ratios[n] = (by["push, XLA path"]["us_per_step"]
                     / by["push, CPU kernels"]["us_per_step"])
    assert {str(n): round(x, 2) for n, x in ratios.items()} == data["xla_over_kernels"]
    assert min(ratios.values()) > 2, ratios   # the decision: several times slower


# ------------------------------------------------------------------ nothing dropped
def test_a_planted_overflow_of_the_spike_buffer_is_counted_exactly():
    x = coba.push.SpikeExchange(40, None, fraction=0.01)
    cap = x.capacity
    on = np.arange(0, 40, 3)[: cap + 2]  # two more spikes than there is room for
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
    net = coba.build(
        book.devices(), scale=SCALE, conn="push", spike_capacity=0.001, kernel=kernel
    )
    sim = coba.Simulation(net, record=())
    with pytest.raises(coba.push.DeliveryOverflow, match="spike_capacity"):
        sim.run(100)  # the opening volley (steps 60-70) does not fit its few slots
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


def test_the_gathered_index_buffers_do_not_shrink():
    """``n`` buffers of ``spike_capacity(N / n)`` on every device: chapter 4b's
    million-neuron run keeps 126,000 neurons per device, and its buffers grow with
    the device count (0.11 MiB on 8 devices, 0.44 MiB on 32)."""
    ids = {k: coba.push.gathered_ids(100_800 * k, 25_200 * k, k) for k in (8, 32)}
    assert ids[8] == {"ids_exc": 8 * 2823, "ids_inh": 8 * 782}
    assert ids[32] == {"ids_exc": 32 * 2823, "ids_inh": 32 * 782}
    assert [coba.gathered_bytes(100_800 * k, 25_200 * k, k) for k in (8, 32)] == [
        115_360, 461_440
    ]
    p = coba.predict(100_800 * 32, 25_200 * 32, 32, "push")
    assert p["gathered"] == 461_440 and p["temporaries"] > p["gathered"]
    assert coba.predict(3360, 840, 4, "index")["gathered"] == 0


def test_a_ledger_without_the_gathered_buffers_fails():
    """Planted: the ledger's temporaries without the gathered index buffers.  At the
    default capacity they exceed the slack from about 32 devices on (chapter 4b); here,
    on 4 devices, a buffer for every neuron (``spike_capacity=1``: n C = N) makes them
    as large beside the rest, and the model without them misses by more than
    ``peak_tolerance``, while the model with them holds."""
    n_exc, n_inh = coba.sizes(1)
    net = coba.build(book.devices(), scale=1, conn="push", spike_capacity=1.0)
    got = coba.compiled_stats(coba.Simulation(net, record=()).compile(4))
    p = coba.predict(n_exc, n_inh, N, "push", spike_capacity=1.0)
    assert p["gathered"] == 4 * (n_exc + n_inh)
    assert abs(got["temporaries"] - p["temporaries"]) <= coba.peak_tolerance(
        p["temporaries"]
    ), (got, p)
    bare = p["temporaries"] - p["gathered"]
    assert abs(got["temporaries"] - bare) > coba.peak_tolerance(bare), (got, p)


# --------------------------------------------------------------- static, no host trips
_WHILE = re.compile(r"=\s.*\swhile\(")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def unknown_trip_counts(text: str) -> list[str]:
    """The ``while`` instructions of an optimized HLO text whose trip count XLA does not
    know (``known_trip_count`` in the backend config).  A local reader until
    ``shardbook.hlo.Program.whiles`` lands."""
    return [
        line.split("=")[0].strip()
        for line in text.splitlines()
        if _WHILE.search(line) and not _TRIPS.search(line)
    ]


def test_every_loop_of_the_push_step_has_a_known_trip_count(push_runs):
    text = push_runs[N, "xla"][2]  # the GPU's path
    assert unknown_trip_counts(text) == []
    assert _TRIPS.findall(text) == [str(STEPS)]  # the time loop only
    assert "conditional(" not in text
    # the check can fail: the event CSR's delivery loops have data-dependent trip counts
    event = coba.build(book.devices(), scale=SCALE, conn="event")
    bad = unknown_trip_counts(coba.Simulation(event, record=()).compile(7).as_text())
    assert len(bad) == 4  # one per projection


def test_push_exchanges_indices_not_bools(push_runs):
    net, _, text = push_runs[N, "auto"]
    gathers = sorted(c.nbytes for c in Program(text).collectives if c.per_step)
    caps = [net.exchange_I.capacity, net.exchange_E.capacity]
    if N == 1:
        assert gathers == []
    else:
        assert gathers == sorted(
            4 * N * c for c in caps
        )  # int32 ids, every device's block


# ------------------------------------------------------------ compiled for 8 x H200
GPU_NEURONS = (
    840_000  # 105,000 per GPU: where the per-device capacity margins are small
)


@pytest.fixture(scope="module")
def h200():
    job = dict(
        builder="shardbook.gputarget_steps:coba_hh",
        devices=8,
        kwargs=dict(conn="push", steps=10, neurons=GPU_NEURONS),
    )
    return gputarget.programs([job], timeout=900)[0]   # page 4b's, stored


def test_push_for_8_h200_has_static_loops_and_an_eighth_of_the_bool_exchange(h200):
    text = h200.text
    assert unknown_trip_counts(text) == [], (
        "a loop would copy its predicate to the host"
    )
    assert _TRIPS.findall(text) == ["10"] and "conditional(" not in text
    step = [c for c in h200.collectives if c.per_step]
    assert [c.op for c in step] == ["all-gather"]  # E and I ids, combined by XLA:GPU
    n_exc, n_inh = round(0.8 * GPU_NEURONS), GPU_NEURONS - round(0.8 * GPU_NEURONS)
    ids = coba.push.gathered_ids(n_exc, n_inh, 8)
    assert sorted(step[0].shapes) == sorted(f"s32[{v}]" for v in ids.values())
    ids_bytes = sum(c.nbytes for c in step)
    bool_bytes = GPU_NEURONS  # the bool all-gather's result: one byte per neuron
    assert ids_bytes <= bool_bytes / 8, (ids_bytes, bool_bytes)
    pred = coba.predict(n_exc, n_inh, 8, "push", counters=True)
    assert h200.memory["arguments"] == pred["arguments"]


def test_a_projection_too_large_for_int32_row_pointers_is_refused():
    """Over 2**31 synapses of one projection on one device, the int32 CSR would wrap:
    the constructor refuses before it allocates anything, and says what to do."""
    from shardbook.coba.events import EventCSR

    n_post, k = 2**26, 64        # 2**32 synapses on one device
    assert k * n_post > 2**31 - 1
    with pytest.raises(ValueError, match="int32 row pointers.*more devices"):
        EventCSR(None, n_post, 1.0, rows=(n_post, k, jax.random.key(0)))
    # just under 2**31 on average, but the random rows' room (10 sd more) is over
    n_post = (2**31 - 1000) // k
    assert k * n_post < 2**31 - 1
    with pytest.raises(ValueError, match="int32 row pointers"):
        EventCSR(None, n_post, 1.0, rows=(n_post, k, jax.random.key(0)))
