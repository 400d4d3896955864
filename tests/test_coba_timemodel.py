"""The time model of chapter 4 (``coba.timemodel``): what does not shrink stays
undivided.

The old model (``gpu_step_s`` in chapter 4) put the event CSR's pass over every
presynaptic neuron into ``per_neuron * N / devices``.  Here the model's bytes per device
are checked against the compiled programs at 1, 2 and 4 devices, and the old division,
planted, fails that check.
"""

import numpy as np
import pytest

from shardbook import book, coba

tm = coba.timemodel
N = len(book.devices())


@pytest.fixture(scope="module")
def event_census():
    if N < 4:
        pytest.skip("the fit needs 1, 2 and 4 devices")
    return tm.measure("event", scale=0.2, counts=(1, 2, 4), devices=book.devices())


def test_the_event_csr_keeps_a_pass_that_does_not_shrink(event_census):
    census, measured = event_census
    assert census.fixed_bytes > 0.2 * measured[4]  # a fifth of the 4-device program
    assert census.host_syncs == 4  # its four delivery loops: data-dependent trip counts
    tm.check_bytes(census, measured)  # a / n + b fits the programs


def test_a_planted_division_of_the_pass_that_does_not_shrink_fails(event_census):
    census, measured = event_census

    def old_model(c, n):  # gpu_step_s's mistake: every per-neuron byte divided by n
        return (c.split_bytes + c.fixed_bytes) / n

    with pytest.raises(AssertionError, match="disagree with the compiled program"):
        tm.check_bytes(census, measured, model=old_model)


def test_terms_keep_their_scaling():
    c = tm.Census(
        "x",
        10**6,
        split_bytes=8e8,
        fixed_bytes=2e7,
        exchange_bytes=1e6,
        collectives=1,
        kernels=30,
        host_syncs=0,
    )
    one, many = ({t.name: t for t in tm.terms(c, n)} for n in (1, 512))
    for name, t in one.items():
        if t.shrinks:
            assert many[name].seconds == pytest.approx(t.seconds / 512)
    assert (
        many["memory, on every device"].seconds
        == one["memory, on every device"].seconds
    )
    assert many["kernel launches"].seconds == one["kernel launches"].seconds
    assert one["collective latency"].seconds == 0 < many["collective latency"].seconds
    assert [t.name for t in tm.terms(c, 1) if t.shrinks] == ["memory, split"]
    # at 512 devices the split memory is small and something that does not shrink wins
    assert (
        tm.dominant(c, 1) == "memory, split" and tm.dominant(c, 512) != "memory, split"
    )
    rows = tm.curve(c)["rows"]
    assert [r["devices"] for r in rows] == list(tm.DEVICE_COUNTS)
    assert all(np.isclose(r["total_s"], tm.step_seconds(c, r["devices"])) for r in rows)


def test_nccl_ring_latency_and_link_arithmetic():
    hw = tm.HARDWARE
    assert tm.allgather_latency(1) == 0
    assert tm.allgather_latency(8) == pytest.approx(6.6e-6 + 7 * 0.6e-6)
    # 16 GPUs on 2 nodes: 14 steps inside nodes (at least the 1 us net overhead), 1
    # across
    assert tm.allgather_latency(16) == pytest.approx(6.6e-6 + 14 * 1.0e-6 + 2.7e-6)
    assert tm.link_seconds(8e6, 8) == pytest.approx(7e6 / hw["nvlink_bytes_per_s"])
    t16 = tm.link_seconds(16e6, 16)
    assert t16 == pytest.approx(
        7e6 / hw["nvlink_bytes_per_s"] + 8e6 / hw["net_bytes_per_s"]
    )
    assert set(tm.SOURCES) == set(hw)  # every hardware figure has its source


def test_work_hoisted_out_of_the_time_loop_is_not_counted_per_step():
    """A pass over a 4 MiB array inside the loop, but invariant: XLA hoists it, and it
    runs once per call.  ``cost_analysis()`` counts it beside the loop body (the planted
    old count); ``program_bytes`` counts the body alone, the 4 KiB state read and
    written (8,232 B with the loop counter)."""
    import jax
    import jax.numpy as jnp

    big = jnp.arange(2**20, dtype=jnp.float32)

    def run(s, big):
        return jax.lax.fori_loop(0, 10, lambda i, s: s * 0.5 + jnp.sin(big).sum(), s)

    compiled = jax.jit(run).lower(jnp.zeros(1024, jnp.float32), big).compile()
    cost = compiled.cost_analysis()
    whole = (cost[0] if isinstance(cost, (list, tuple)) else cost)["bytes accessed"]
    assert whole > 2 * big.nbytes  # the old count charges the hoisted pass to a step
    assert 8192 <= tm.program_bytes(compiled) < 8192 + 64
