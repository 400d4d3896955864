"""What a network's graph is, read where it lives: in-degrees and a fingerprint.

Each device reduces its own part of every projection to a few integers under
``jax.shard_map``; only those are gathered, so this works on a million neurons and
across processes.  :func:`fingerprint` hashes each projection's multiset of edges as a
wrapping uint32 *sum* of a mixing hash: the same graph gives the same fingerprint
whatever the representation, mesh or process count, and a graph drawn differently
(another seed or JAX random-bit generator, a "rows" graph on another device count)
another.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from .events import EventCSR
from .once import once_jit
from .parameters import NEURON

__all__ = ["in_degree", "fingerprint", "edge_summary", "DegreeStats"]

_M1, _M2 = (
    np.uint32(0x9E3779B1),
    np.uint32(0x85EBCA77),
)  # golden-ratio, murmur constants
_SEEDS = (np.uint32(0x243F6A88), np.uint32(0xB7E15162))  # two hashes: 64 bits in all


def _mix(pre, post, seed):
    """A 32-bit hash of the edge (pre, post): murmur3's finaliser of a mixed pair."""
    x = (pre.astype(jnp.uint32) * _M1) ^ (post.astype(jnp.uint32) * _M2 + seed)
    x = x ^ (x >> 16)
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _local_summary(pre, post_local, mult, *, n_local, block):
    """One device's int32[8] summary (:func:`edge_summary`) of its edges: ``pre``
    sources, ``post_local`` targets among its ``n_local`` neurons, ``mult`` synapses
    per entry (0: padding)."""
    post = block * n_local + post_local
    degree = jnp.zeros((n_local,), jnp.int32).at[post_local].add(mult, mode="drop")
    total = jnp.sum(degree)
    ref = total // n_local  # centre the squares: exact in int32
    dev = degree - ref
    hashes = [jnp.sum(mult.astype(jnp.uint32) * _mix(pre, post, s)) for s in _SEEDS]
    return jnp.stack(
        [
            jnp.int32(n_local),
            total,
            ref,
            jnp.sum(dev * dev),
            jnp.min(degree),
            jnp.max(degree),
            *(jax.lax.bitcast_convert_type(h, jnp.int32) for h in hashes),
        ]
    )


def _index_edges(conn, n_pre):
    k, b = conn.shape
    post = jnp.broadcast_to(jnp.arange(b, dtype=jnp.int32), (k, b))
    return (
        conn.reshape(-1),
        post.reshape(-1),
        (conn < n_pre).astype(jnp.int32).reshape(-1),
    )


def _mask_edges(counts, n_pre):
    n, b = counts.shape
    pre = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[:, None], (n, b))
    post = jnp.broadcast_to(jnp.arange(b, dtype=jnp.int32)[None, :], (n, b))
    return pre.reshape(-1), post.reshape(-1), counts.astype(jnp.int32).reshape(-1)


def _event_edges(indptr, indices, n_pre):
    s = jnp.arange(indices.shape[0], dtype=jnp.int32)
    # synapse s's row = rows starting at or before it, less one: a scatter and a running
    # sum, one pass (a searchsorted is log2(n_pre) passes: 10 s at 10^6 neurons, CPU)
    starts = jnp.zeros(indices.shape, jnp.int32).at[indptr[1:]].add(1, mode="drop")
    row = jnp.cumsum(starts, dtype=jnp.int32)
    valid = (s < indptr[n_pre]).astype(jnp.int32)  # past the last row: padding, room
    return jnp.clip(row, 0, n_pre - 1), indices, valid


def _parts(comm):
    """(edge function, arrays, their PartitionSpecs, n_pre, n_post) of a projection."""
    kind = getattr(comm, "kind", None)
    op = getattr(comm, "op", None)
    if isinstance(op, EventCSR):
        return (
            partial(_event_edges, n_pre=op.n_pre),
            (op.indptr.value, op.indices.value),
            (P(NEURON), P(NEURON)),
            op.n_pre,
            op.n_post,
        )
    n_pre, n_post = comm.shape
    if kind in ("index", "mask"):
        conn = comm.conn.value if hasattr(comm.conn, "value") else comm.conn
        fn = _index_edges if kind == "index" else _mask_edges
        return partial(fn, n_pre=n_pre), (conn,), (P(None, NEURON),), n_pre, n_post
    if kind == "csr":  # BrainPy's layer holds the whole CSR on every device
        indices, indptr = (jnp.asarray(a, jnp.int32) for a in (op.indices, op.indptr))
        return (
            partial(_event_edges, n_pre=n_pre),
            (indptr, indices),
            None,
            n_pre,
            n_post,
        )
    raise ValueError(
        f"a {kind!r} projection stores no graph to read (the 'jit' one "
        "regenerates it from a seed at every step); add its kind to "
        "shardbook/coba/connectivity.py"
    )


def edge_summary(comm, mesh) -> np.ndarray:
    """Per device (rows): neurons, synapses, centre, sum of squared deviations of the
    in-degree from the centre, min and max in-degree, two 32-bit edge hashes; readable
    in every process.  ``ValueError`` for a ``"jit"`` projection (it stores none)."""
    edges, arrays, specs, n_pre, n_post = _parts(comm)
    devices = 1 if mesh is None or specs is None else int(mesh.shape[NEURON])
    program = _summary_program(
        edges.func,
        n_pre,
        n_post // devices,
        mesh if devices > 1 else None,
        specs if devices > 1 else None,
    )
    return np.asarray(jax.device_get(program(*arrays)), dtype=np.int64)


@lru_cache(maxsize=64)
def _summary_program(edges, n_pre, n_local, mesh, specs):
    """The jitted summary of one kind of projection: compiled once per shapes."""

    def local(*parts):
        block = 0 if mesh is None else jax.lax.axis_index(NEURON)
        out = _local_summary(*edges(*parts, n_pre=n_pre), n_local=n_local, block=block)
        return out[None] if mesh is None else jax.lax.all_gather(out, NEURON)

    if mesh is None:
        return once_jit(local)
    local = jax.shard_map(
        local, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False
    )
    return once_jit(local, out_shardings=jax.sharding.NamedSharding(mesh, P()))


class DegreeStats(dict):
    """mean, sd, min, max of one projection's in-degree over its postsynaptic neurons,
    and ``neurons``, ``synapses``; printed in one line."""

    def __str__(self):
        return (
            f"{self['mean']:.2f} +- {self['sd']:.2f} inputs "
            f"({self['min']}-{self['max']}, {self['synapses']:,} synapses)"
        )


def _degree(rows: np.ndarray) -> DegreeStats:
    neurons, total = int(rows[:, 0].sum()), int(rows[:, 1].sum())
    # sum of d^2 from each device's centred sums, in Python integers: exact
    squares = sum(
        int(q) + 2 * int(c) * (int(t) - int(n) * int(c)) + int(n) * int(c) ** 2
        for n, t, c, q in rows[:, :4]
    )
    mean = total / neurons
    return DegreeStats(
        mean=mean,
        sd=float(np.sqrt(max(squares / neurons - mean**2, 0))),
        min=int(rows[:, 4].min()),
        max=int(rows[:, 5].max()),
        neurons=neurons,
        synapses=total,
    )


def in_degree(net) -> dict[str, DegreeStats]:
    """The realised in-degree of each projection of ``net``, from each device's part."""
    return {
        name: _degree(edge_summary(proj.comm, net.mesh))
        for name, proj in net.projections.items()
    }


def fingerprint(net) -> dict[str, str]:
    """Every projection's ``"<synapses>:<64-bit hash>"``, and ``"network"``, a digest
    of them all; independent of representation and mesh (see the module docstring)."""
    out = {}
    for name, proj in net.projections.items():
        rows = edge_summary(proj.comm, net.mesh)
        h = [
            int(np.uint32(np.sum(rows[:, 6 + j].astype(np.uint32), dtype=np.uint32)))
            for j in range(2)
        ]
        out[name] = f"{int(rows[:, 1].sum())}:{h[0]:08x}{h[1]:08x}"
    out["network"] = hashlib.sha256(
        " ".join(f"{k}={v}" for k, v in sorted(out.items())).encode()
    ).hexdigest()[:16]
    return out
