"""Random numbers made where they live: every random array of the network, from one key,
each device computing its own slice, the same on every mesh (``sharded_random``)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import brainpy as bp  # noqa: F401  (BrainPy's sharding module needs brainpy imported)
import brainpy.math as bm

from .once import compile_once
from .parameters import GE0_MEAN, GE0_SD, GI0_MEAN, GI0_SD, NEURON, V0_MEAN, V0_SD

__all__ = [
    "sharded_random", "random_state", "random_state_axes", "bernoulli_sources",
    "bernoulli_k_max", "replicated_any", "zeros_variable"
]


# region: coba.sharded-random
def sharded_random(fn, key, axis_names, *static):
    """``fn(key, *static)`` under ``jit`` with ``out_shardings``: each device its slice.

    ``axis_names`` names the output's axes (a dict of them when ``fn`` returns a dict).
    ``jit`` never lets a sharding change a result, so the numbers are the same on every
    mesh; JAX's partitionable threefry (the default since JAX 0.5) lets each device
    compute only its own slice.  Outside a ``device_mesh`` block there is no sharding.
    """
    if isinstance(axis_names, dict):
        sharding = {name: bm.sharding.get_sharding(names)
                    for name, names in axis_names.items()}
        sharding = None if None in sharding.values() else sharding
    else:
        sharding = bm.sharding.get_sharding(axis_names)
    return _compiled(fn, key, sharding, static)(key)  # jax.jit(fn, out_shardings=...)
# endregion


# region: coba.random-state
def random_state(key, populations, projections, start="rest"):
    """Every random array of a network, from one key, in one compiled program.

    ``populations``: ((name, size), ...), each gets initial potentials ``"<name>.V"``
    (and, with ``start="random"``, conductances ``"<name>.ge"``, ``"<name>.gi"``);
    ``projections``: ((name, k, n_pre, n_post), ...), each gets a ``[k, n_post]`` matrix
    of presynaptic sources drawn with replacement.  Every piece has its own stream.
    """
    out = {}
    for i, (name, size) in enumerate(populations):
        normal = jax.random.normal(jax.random.fold_in(key, i), (size,), jnp.float32)
        out[f"{name}.V"] = V0_MEAN + V0_SD * normal
        if start == "random":
            draws = (("ge", GE0_MEAN, GE0_SD), ("gi", GI0_MEAN, GI0_SD))
            for j, (g, mean, sd) in enumerate(draws):
                sub = jax.random.fold_in(key, 200 + 100 * j + i)
                out[f"{name}.{g}"] = mean + sd * jax.random.normal(sub, (size,))
    for i, (name, k, n_pre, n_post) in enumerate(projections, start=100):
        sub = jax.random.fold_in(key, i)
        out[name] = jax.random.randint(sub, (k, n_post), 0, n_pre, dtype=jnp.int32)
    return out
# endregion


def random_state_axes(populations, projections, start="rest"):
    """Axis names of ``random_state``'s outputs: neurons split, sources by column."""
    out = {f"{name}.V": [NEURON] for name, _ in populations}
    if start == "random":
        out |= {
            f"{name}.{g}": [NEURON] for name, _ in populations for g in ("ge", "gi")
        }
    return out | {p[0]: [None, NEURON] for p in projections}


# region: coba.bernoulli
def bernoulli_sources(key, n_pre, n_post, p, k_max):
    """The benchmark's graph: each (pre, post) pair connects with probability ``p``.

    Returned in the index layout: a ``[k_max, n_post]`` matrix whose column j lists the
    sources of neuron j in increasing order, padded with ``n_pre`` (a source that never
    spikes).  Draws an ``[n_pre, n_post]`` Bernoulli matrix: fine at benchmark size.
    """
    mask = jax.random.bernoulli(key, p, (n_pre, n_post))
    rank = jnp.cumsum(mask, axis=0, dtype=jnp.int32) - 1  # among the column's sources
    slot = jnp.where(mask, rank, k_max)  # k_max: out of bounds, dropped
    shape = (n_pre, n_post)
    rows = jnp.broadcast_to(jnp.arange(n_pre, dtype=jnp.int32)[:, None], shape)
    cols = jnp.broadcast_to(jnp.arange(n_post, dtype=jnp.int32)[None, :], shape)
    empty = jnp.full((k_max, n_post), n_pre, jnp.int32)
    return empty.at[slot, cols].set(rows, mode="drop")
# endregion


def bernoulli_k_max(n_pre, p):
    """Rows of :func:`bernoulli_sources`' matrix: the mean in-degree plus 8 standard
    deviations (a column that would need more raises when the network is built)."""
    mean = n_pre * p
    return int(np.ceil(mean + 8 * np.sqrt(mean * (1 - p)))) + 1


def replicated_any(x, replicated=None) -> bool:
    """``bool(x.any())`` of a global array, in any process: reduced under ``jit`` to
    ``replicated`` (``None`` without a mesh), so nothing else is gathered."""
    return bool(jax.device_get(_reduce(jnp.any, x, replicated)))


def _reduce(fn, x, replicated):
    return jax.jit(fn, out_shardings=replicated)(x)


def zeros_variable(n, dtype=jnp.float32):
    """A Variable of ``n`` zeros, made split along ``neuron``."""
    return bm.Variable(sharded_random(_zeros_of, jax.random.PRNGKey(0), [NEURON], n,
                                      jnp.dtype(dtype)))


_COMPILED: dict = {}


def _compiled(fn, key, sharding, static):
    """``jax.jit(fn, out_shardings=sharding)`` lowered and compiled once per shapes."""
    shard_key = (
        tuple(sorted(sharding.items())) if isinstance(sharding, dict) else sharding
    )
    cache_key = (fn, static, shard_key, jnp.shape(key), jnp.result_type(key),
                 getattr(key, "sharding", None))
    if cache_key not in _COMPILED:
        with jax.threefry_partitionable(True):
            static_nums = tuple(range(1, 1 + len(static)))
            jitted = jax.jit(fn, static_argnums=static_nums, out_shardings=sharding)
            lowered = jitted.lower(key, *static)
        # Runs once per network, so compile_once may compile it quickly; the size of
        # bernoulli_sources' work is its [n_pre, n_post] draw, not its output.
        work = static[0] * static[1] if fn is bernoulli_sources else 0
        _COMPILED[cache_key] = compile_once(lowered, work=work)
    return _COMPILED[cache_key]


def _zeros_of(key, n, dtype):
    return jnp.zeros((n,), dtype)


def _full_of(key, n, value):
    return jnp.full((n,), value, jnp.float32)
