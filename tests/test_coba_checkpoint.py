"""Checkpoints that name their network (``shardbook.coba.checkpoint``, chapter 5b).

* a non-default network (Bernoulli graph, event delivery, randomised start, counters)
  saved on 4 devices restores onto 2 (re-split, not only gathered) and continues bit
  for bit, counters too (tests/test_multiprocess.py restores this graph saved by 2
  processes onto 2 devices, and tests/test_checkpoint.py restores the default network
  from 4 onto 2 and 1);
* restoring into a different network raises, naming what differs;
* (a "rows" graph, drawn per device block, restored onto another device count raises:
  tests/test_multiprocess.py, on a checkpoint saved by 2 processes);
* a graph rebuilt with other random bits (a planted change of the generator, as a future
  JAX might make) fails the fingerprint and raises;
* a simulation with counters cannot be restored without them.
"""

import jax
import numpy as np
import pytest

from shardbook import book, coba

ck = coba.checkpoint
N = len(book.devices())
NET = dict(sizes=(672, 168), graph="bernoulli", start="random", conn="event")
HALF = 30


def _same(a, b):
    return all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    net = coba.build(book.devices(), **NET)
    sim = coba.Simulation(net, record=("spike", "V", "count"))
    sim.run(HALF)
    path = tmp_path_factory.mktemp("ckpt") / "bernoulli"
    assert ck.save(path, sim) == HALF
    after = {k: np.asarray(v) for k, v in sim.run(HALF).items()}
    counts = {k: np.asarray(v.value) for k, v in sim.counts.items()}
    return path, after, counts


def test_the_checkpoint_names_its_network(saved):
    path, _, _ = saved
    meta = ck.read(path)
    assert meta["config"]["graph"] == "bernoulli" and meta["config"]["conn"] == "event"
    assert meta["config"]["start"] == "random" and meta["config"]["sizes"] == [672, 168]
    assert meta["config"]["dt"] == coba.DT and meta["step"] == HALF
    assert meta["devices"] == N and not meta["graph_depends_on_devices"]
    assert meta["counts"] == ["E", "I"] and set(meta["fingerprint"]) >= {
        "E2E",
        "network",
    }


@pytest.mark.parametrize("k", [2])  # re-split, not only gathered onto one device
def test_restored_on_fewer_devices_continues_bit_for_bit(saved, k):
    path, after, counts = saved
    sim = ck.restore(path, book.devices()[:k])
    assert sim.t == HALF and sim.net.devices == k
    out = sim.run(HALF)
    assert np.asarray(out["E.spike"]).any(), "a silent network proves nothing"
    assert _same(out, after)
    assert all(
        np.array_equal(np.asarray(sim.counts[p].value), counts[p]) for p in counts
    )


def test_restoring_into_another_network_raises(saved):
    path, _, _ = saved
    other = coba.build(book.devices(), **dict(NET, seed=1))
    with pytest.raises(ck.CheckpointMismatch, match="seed: saved 0, here 1"):
        ck.restore(path, into=other)
    with pytest.raises(ck.CheckpointMismatch, match="record=\\('count'"):
        ck.restore(path, book.devices(), record=("spike",))


def test_a_changed_random_generator_fails_the_fingerprint(saved, monkeypatch):
    """A planted change of the random bits: every Bernoulli draw flips one pair."""
    path, _, _ = saved
    rnd = coba.randomness
    real = rnd.bernoulli_sources

    def other_bits(key, n_pre, n_post, p, k_max):
        return real(jax.random.fold_in(key, 1), n_pre, n_post, p, k_max)

    monkeypatch.setattr(rnd, "bernoulli_sources", other_bits)
    monkeypatch.setattr(coba.network, "bernoulli_sources", other_bits)
    with pytest.raises(ck.CheckpointMismatch, match="fingerprints differ in E2E, E2I"):
        ck.restore(path, book.devices())
