"""Checkpoints of a running COBA-HH simulation that name their network (chapter 5b).

Saved with Orbax (``orbax-checkpoint`` 0.12.8): ``state`` (every V, m, h, n, last
spikes and g, split as the network is), ``counts`` (of ``record=("count",)``, if kept),
``rng`` (BrainPy's global key) and ``network`` (JSON, :func:`describe`: the config
:func:`~shardbook.coba.build` needs, the step, versions, a connectivity fingerprint).

The connectivity is not saved but rebuilt on the restoring mesh; the fingerprint proves
it is the saved one, or :func:`restore` raises :class:`CheckpointMismatch` saying what
differs (another network, a "rows" graph on another device count, other random bits).
Every process calls :func:`save` and :func:`restore`; their process counts may differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np

__all__ = [
    "SCHEMA",
    "CheckpointMismatch",
    "state_of",
    "describe",
    "save",
    "read",
    "restore",
    "compare_config",
]

SCHEMA = "shardbook.coba-checkpoint/1"
_DEVICE_BOUND_GRAPHS = ("rows",)  # graphs drawn per device block


class CheckpointMismatch(ValueError):
    """The network at hand, or the one rebuilt, is not the network that was saved."""


# region: coba.checkpoint.state
def state_of(net) -> dict:
    """The dynamical state of a network by stable names: {population: {V, m, h, n,
    spike}, projection: {g}} of BrainPy Variables (no connectivity)."""
    state = {
        name: {v: getattr(pop, v) for v in ("V", "m", "h", "n", "spike")}
        for name, pop in net.populations.items()
    }
    state.update(
        {name: {"g": proj.refs["syn"].g} for name, proj in net.projections.items()}
    )
    return state
# endregion


def _is_var(x):
    import brainpy.math as bm

    return isinstance(x, bm.Variable)


def _values(tree):
    return jax.tree.map(lambda v: v.value, tree, is_leaf=_is_var)


def _json(x):
    return json.loads(json.dumps(x))


def describe(sim) -> dict:
    """What the checkpoint of ``sim`` says about its network (the JSON item)."""
    from importlib.metadata import version

    from .connectivity import fingerprint

    net = sim.net
    config = _json(net.config)
    return dict(
        schema=SCHEMA,
        config=config,
        devices=net.devices,
        graph_depends_on_devices=config["graph"] in _DEVICE_BOUND_GRAPHS,
        fingerprint=fingerprint(net),
        step=int(sim.t),
        record=list(sim.record),
        counts=sorted(sim.counts),
        processes=jax.process_count(),
        versions={
            p: version(p) for p in ("jax", "jaxlib", "brainpy", "orbax-checkpoint")
        },
    )


def save(directory, sim) -> int:
    """Save ``sim`` at its step ``sim.t`` into the Orbax directory ``directory``; every
    process must call it.  Returns the step."""
    import orbax.checkpoint as ocp

    key = np.asarray(jax.random.key_data(_bm_key()))
    items = dict(
        state=ocp.args.StandardSave(_values(state_of(sim.net))),
        rng=ocp.args.StandardSave({"key": key}),
        network=ocp.args.JsonSave(describe(sim)),
    )
    if sim.counts:
        items["counts"] = ocp.args.StandardSave(
            {k: v.value for k, v in sim.counts.items()}
        )
    with ocp.CheckpointManager(Path(directory).absolute()) as manager:
        manager.save(int(sim.t), args=ocp.args.Composite(**items))
        manager.wait_until_finished()
    return int(sim.t)


def read(directory, step: int | None = None) -> dict:
    """The JSON item of a checkpoint (its network), latest step by default;
    ``FileNotFoundError`` if there is none."""
    import orbax.checkpoint as ocp

    with ocp.CheckpointManager(Path(directory).absolute()) as manager:
        step = manager.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no committed checkpoint in {directory}")
        return manager.restore(
            step, args=ocp.args.Composite(network=ocp.args.JsonRestore())
        )["network"]


def compare_config(saved: dict, config: dict) -> list[str]:
    """The differences between two network configurations, one line each."""
    a, b = _json(saved), _json(config)
    return [
        f"{k}: saved {a.get(k)!r}, here {b.get(k)!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def restore(directory, devices=None, step: int | None = None, into=None, record=None):
    """A :class:`~shardbook.coba.Simulation` that continues the checkpoint.

    Builds the saved network on ``devices`` (or takes ``into``, which must have the
    saved configuration), checks its fingerprint, and loads state, counters and key,
    each device reading its own part.  ``record`` defaults to the saved one.  Raises
    :class:`CheckpointMismatch` where the network is not the saved one.

    Long because: the steps must run in this order on one network (build, check, place,
    read); split, the order would be a convention between functions.
    """
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from .connectivity import fingerprint
    from .network import build
    from .run import Simulation

    meta = read(directory, step)
    if meta.get("schema") != SCHEMA:
        raise CheckpointMismatch(f"not a {SCHEMA} checkpoint: {meta.get('schema')!r}")
    config = meta["config"]
    if into is not None:
        diff = compare_config(config, into.config)
        if diff:
            raise CheckpointMismatch(
                "the checkpoint holds another network than the one "
                "given: " + "; ".join(diff)
            )
        net = into
    else:
        n = len(devices) if devices is not None else 1
        if meta["graph_depends_on_devices"] and n != meta["devices"]:
            raise CheckpointMismatch(
                f"graph={config['graph']!r} is drawn per device block, so it depends "
                f"on the device count: saved on {meta['devices']} devices, restoring "
                f"onto {n}. Restore onto {meta['devices']} devices (in any number of "
                "processes), or "
                "save a graph that does not depend on the mesh ('fixed', 'bernoulli')."
            )
        net = build(devices, **config)
    if (
        into is not None
        and meta["graph_depends_on_devices"]
        and net.devices != meta["devices"]
    ):
        raise CheckpointMismatch(
            f"graph={config['graph']!r}: saved on {meta['devices']} "
            f"devices, the network given has {net.devices}"
        )
    here = fingerprint(net)
    if here != meta["fingerprint"]:
        bad = [
            k
            for k in meta["fingerprint"]
            if k != "network" and meta["fingerprint"][k] != here.get(k)
        ]
        saved_jax, now_jax = meta.get("versions", {}).get("jax"), jax.__version__
        raise CheckpointMismatch(
            "the connectivity rebuilt from the saved configuration is not the saved "
            "one "
            f"(fingerprints differ in {', '.join(bad)}). Saved with JAX {saved_jax}, "
            f"rebuilt with JAX {now_jax}: another random-bit generator, or a changed "
            "graph builder, draws another network. Restore with the saved versions."
        )
    record = tuple(meta["record"] if record is None else record)
    sim = Simulation(net, record=record)
    replicated = NamedSharding(net.mesh, P()) if net.mesh is not None else None

    def target(v):
        sharding = v.value.sharding
        if net.mesh is not None and not isinstance(sharding, NamedSharding):
            sharding = replicated
        return jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sharding)

    state = state_of(net)
    items = dict(
        state=ocp.args.StandardRestore(jax.tree.map(target, state, is_leaf=_is_var)),
        rng=ocp.args.StandardRestore({"key": np.zeros((2,), np.uint32)}),
    )
    if meta["counts"]:
        if not sim.counts:
            raise CheckpointMismatch(
                "the checkpoint has spike counters: restore with record=('count', ...)"
            )
        items["counts"] = ocp.args.StandardRestore(
            {k: target(sim.counts[k]) for k in meta["counts"]}
        )
    with ocp.CheckpointManager(Path(directory).absolute()) as manager:
        back = manager.restore(meta["step"], args=ocp.args.Composite(**items))
    jax.tree.map(
        lambda v, x: setattr(v, "value", x), state, back["state"], is_leaf=_is_var
    )
    for k in meta["counts"]:
        sim.counts[k].value = back["counts"][k]
    _set_bm_key(np.asarray(back["rng"]["key"], np.uint32))
    sim.t = meta["step"]
    return sim


def _bm_key():
    import brainpy.math as bm

    return bm.random.DEFAULT.value


def _set_bm_key(data):
    import brainpy.math as bm

    bm.random.DEFAULT.value = jax.random.wrap_key_data(data)
