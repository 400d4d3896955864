"""Chapter 5b's claim: a COBA-HH checkpoint restored onto another mesh continues bit for
bit.

The state (V, m, h, n, last step's spikes, the four conductances, BrainPy's global key
and the time step) is saved with Orbax on 4 devices; the connectivity is saved as its
seed and size only.  Restored onto 2 devices and onto 1, the continued simulation must
equal the uninterrupted one bit for bit (``verify.identical``), and the same check must
fail when the restore drops part of the state: the spike history (the one-step synaptic
delay buffer), or the random state of a network that draws random numbers.
"""

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainpy.math as bm

from shardbook import coba, verify

NETWORK = dict(scale=0.5, seed=0)  # 1,680 E + 420 I: divisible by 1, 2 and 4 devices
HALF = 20
is_var = lambda x: isinstance(x, bm.Variable)  # noqa: E731


state_of = coba.checkpoint.state_of  # the state chapter 5b saves, by stable names


def values(state):
    return jax.tree.map(lambda v: v.value, state, is_leaf=is_var)


class NoisySimulation(coba.Simulation):
    """The network plus a small noise current drawn from BrainPy's global key each
    step."""

    def step_body(self, i):
        for pop in self.net.populations.values():
            pop.V.value = pop.V.value + 0.5 * bm.random.normal(size=pop.num)
        return super().step_body(i)


def spikes(out):
    return {pop: np.asarray(out[f"{pop}.spike"]) for pop in ("E", "I")}


@pytest.fixture(
    scope="module",
    params=[coba.Simulation, NoisySimulation],
    ids=["deterministic", "noisy"],
)
def saved(request, tmp_path_factory):
    """Run HALF steps on 4 devices, save, run HALF more: (manager, second half,
    kind)."""
    kind = request.param
    bm.random.seed(123)
    net = coba.build(jax.devices(), **NETWORK)
    sim = kind(net, record=("spike",))
    sim.run(HALF)
    manager = ocp.CheckpointManager(tmp_path_factory.mktemp("coba") / "ckpt")
    manager.save(
        sim.t,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(values(state_of(net))),
            rng=ocp.args.StandardSave(
                {"key": jax.random.key_data(bm.random.DEFAULT.value)}
            ),
            network=ocp.args.JsonSave(dict(NETWORK, step=sim.t)),
        ),
    )
    manager.wait_until_finished()
    after = sim.run(HALF)
    yield manager, spikes(after), kind
    manager.close()


_NETS: dict = {}
_SIMS: dict = {}


def rebuild(kind, k, scale, seed):
    """The network rebuilt from its saved configuration on k devices, as built (every
    state variable at its initial value), and a ``kind`` simulation of it.

    Built once per (k, scale, seed), its loop compiled once per kind: a later restore
    onto the same devices first resets the state to the values of the fresh build,
    so it starts from exactly what a new build would (the connectivity is not state:
    it never changes)."""
    key = (k, scale, seed)
    if key not in _NETS:
        net = coba.build(jax.devices()[:k], scale=scale, seed=seed)
        _NETS[key] = net, values(state_of(net))
    net, initial = _NETS[key]
    if (kind, key) not in _SIMS:
        _SIMS[kind, key] = kind(net, record=("spike",))
    jax.tree.map(
        lambda v, x: setattr(v, "value", x), state_of(net), initial, is_leaf=is_var
    )
    return net, _SIMS[kind, key]


def resume(manager, kind, k, drop=()):
    meta = manager.restore(
        manager.latest_step(), args=ocp.args.Composite(network=ocp.args.JsonRestore())
    )["network"]
    net, sim = rebuild(kind, k, meta["scale"], meta["seed"])
    state = state_of(net)
    target = jax.tree.map(
        lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=v.value.sharding),
        state,
        is_leaf=is_var,
    )
    key = jax.ShapeDtypeStruct((2,), np.uint32, sharding=NamedSharding(net.mesh, P()))
    back = manager.restore(
        meta["step"],
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target),
            rng=ocp.args.StandardRestore({"key": key}),
        ),
    )
    for name, var in drop:
        if name == "rng":
            continue
        del back["state"][name][var], state[name][var]
    jax.tree.map(
        lambda v, x: setattr(v, "value", x), state, back["state"], is_leaf=is_var
    )
    if ("rng", "key") in drop:
        bm.random.seed(999)  # a fresh key instead of the saved one
    else:
        bm.random.DEFAULT.value = jax.random.wrap_key_data(back["rng"]["key"])
    sim.t = meta["step"]
    return spikes(sim.run(HALF))


def test_restored_on_fewer_devices_continues_bit_for_bit(saved):
    manager, after, kind = saved
    assert all(x.any() for x in after.values()), "a silent network proves nothing"
    for k in [2, 1] if kind is coba.Simulation else [1]:
        verify.identical(
            f"test.ch5b.coba.{kind.__name__.lower()}-{k}",
            resume(manager, kind, k),
            after,
        )


def test_dropping_the_spike_history_is_caught(saved):
    manager, after, kind = saved
    if kind is not coba.Simulation:
        pytest.skip("shown once, on the network of the book")
    dropped = resume(manager, kind, 1, drop=[("E", "spike"), ("I", "spike")])
    with pytest.raises(AssertionError, match="NOT bit-identical"):
        verify.identical("test.ch5b.coba.no-spikes", dropped, after)


def test_dropping_the_random_state_is_caught(saved):
    """The book's network draws no random numbers once built; a noisy one does."""
    manager, after, kind = saved
    if kind is coba.Simulation:
        pytest.skip("this network draws no random numbers once built")
    dropped = resume(manager, kind, 1, drop=[("rng", "key")])
    with pytest.raises(AssertionError, match="NOT bit-identical"):
        verify.identical("test.ch5b.coba.no-rng", dropped, after)
