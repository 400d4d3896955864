"""Event-driven connectivity that shards: a CSR per device, by presynaptic row.

Each device owns a block of B postsynaptic neurons.  It keeps, for its block only, the
graph as compressed sparse rows indexed by the *presynaptic* neuron: ``indptr`` (n_pre +
1 row starts) and ``indices`` (the local target of each synapse).  A time step then
visits only the rows of the neurons that spiked ("push", as event-driven simulators do),
instead of reading every synapse ("pull", the index matrix).  Delivery runs under
``jax.shard_map``: each device walks its own rows; nothing is exchanged but the gathered
spike vector that every representation needs.

JAX needs static shapes, so the events of a step are processed in chunks of ``chunk``
synapses by a ``lax.while_loop``: a quiet step costs one chunk, a burst costs more
chunks, and no event is ever dropped.  The input of a neuron is an integer count of
spikes (exact in float32) times the weight, exactly like the index matrix: the two give
the same spikes. Anchors: brainevent's event CSR kernels and GeNN's sparse "push"
connectivity.
"""
from __future__ import annotations

from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import brainpy as bp
import brainpy.math as bm

from .once import once_jit
from .parameters import NEURON

__all__ = [
    "CHUNK_FRACTION", "local_csr", "rows_capacity", "random_rows", "deliver",
    "chunk_size", "EventCSR"
]

CHUNK_FRACTION = 1 / 256  # a chunk covers this fraction of a device's synapses


def local_csr(sources, n_pre):
    """One device's CSR by presynaptic row, from its ``[k, B]`` block of sources.

    Sources equal to ``n_pre`` (padding of a Bernoulli graph) sort last, past
    ``indptr[n_pre]``, so no row ever reaches them.
    """
    k, b = sources.shape
    pre = sources.reshape(-1)
    post = jnp.broadcast_to(jnp.arange(b, dtype=jnp.int32), (k, b)).reshape(-1)
    pre, post = jax.lax.sort((pre, post), num_keys=1, is_stable=True)
    rows = jnp.arange(n_pre + 1, dtype=jnp.int32)
    indptr = jnp.searchsorted(pre, rows, side="left").astype(jnp.int32)
    return indptr, post


def rows_capacity(k: int, n_local: int) -> int:
    """Static room for a block's synapses when their number is random (Poisson, mean k
    n_local): the mean plus 10 standard deviations."""
    mean = k * n_local
    return int(mean + 10 * np.sqrt(mean) + 64)


def random_rows(key, n_pre, n_local, k, capacity):
    """One block's graph drawn directly by presynaptic row, with no sort.

    Source j gets Poisson(k n_local / n_pre) targets in the block, each uniform: every
    (pre, post) pair is connected with probability about p = k / n_pre, independently
    (Bernoulli, as in the benchmark, up to double edges of probability p^2 / 2), and
    each neuron receives k inputs on average.  The block's key is its own (seeded per
    block).
    """
    degree = jax.random.poisson(
        jax.random.fold_in(key, 0), k * n_local / n_pre, (n_pre,)
    )
    indptr = jnp.concatenate(
        [jnp.zeros(1, jnp.int32), jnp.cumsum(degree, dtype=jnp.int32)]
    )
    indices = jax.random.randint(jax.random.fold_in(key, 1), (capacity,), 0, n_local,
                                 dtype=jnp.int32)
    return indptr, indices


def deliver(spikes, indptr, indices, *, n_local, chunk):
    """Spike counts of the ``n_local`` local neurons: the rows of the spiking sources.

    ``spikes``: bool[n_pre], every presynaptic spike (the same on every device).
    """
    degree = indptr[1:] - indptr[:-1]
    events = jnp.where(spikes, degree, 0)
    ends = jnp.cumsum(events)            # the events of source j end at ends[j]
    total = ends[-1]
    last = indices.shape[0] - 1

    def body(carry):
        c, count = carry
        p = c * chunk + jnp.arange(chunk, dtype=jnp.int32)  # this chunk's event numbers
        row = jnp.minimum(jnp.searchsorted(ends, p, side="right"), spikes.shape[0] - 1)
        syn = indptr[row] + p - (ends[row] - events[row])
        target = jnp.where(p < total, indices[jnp.clip(syn, 0, last)], n_local)
        return c + 1, count.at[target].add(1., mode="drop")  # n_local: dropped

    count = jnp.zeros((n_local,), jnp.float32)
    _, count = jax.lax.while_loop(lambda carry: carry[0] * chunk < total, body,
                                  (jnp.int32(0), count))
    return count


def chunk_size(synapses_per_device: int, fraction: float = CHUNK_FRACTION) -> int:
    """Events processed per loop iteration: a fraction of a device's synapses."""
    return max(64, int(np.ceil(synapses_per_device * fraction)))


# One jitted builder per mesh and size, reused by every network built on it: a fresh
# partial or closure per projection would miss jit's cache and compile again each time.
@lru_cache(maxsize=None)
def _csr_builder(mesh, n_pre: int):
    build = partial(local_csr, n_pre=n_pre)
    if mesh is not None:
        build = jax.shard_map(build, mesh=mesh, in_specs=P(None, NEURON),
                              out_specs=(P(NEURON), P(NEURON)), check_vma=False)
    return once_jit(build)


@lru_cache(maxsize=None)
def _rows_builder(mesh, n_pre: int, n_local: int, k: int, cap: int):
    def build(key):
        block = jax.lax.axis_index(NEURON) if mesh is not None else 0
        return random_rows(jax.random.fold_in(key, block), n_pre, n_local, k, cap)

    if mesh is not None:
        build = jax.shard_map(build, mesh=mesh, in_specs=P(),
                              out_specs=(P(NEURON), P(NEURON)), check_vma=False)
    return once_jit(build)


@lru_cache(maxsize=None)
def _most_synapses(mesh, devices: int):
    """The largest block's synapse count (the last entry of its indptr), replicated."""
    replicated = None if mesh is None else jax.sharding.NamedSharding(mesh, P())
    return once_jit(lambda p: p.reshape(devices, -1)[:, -1].max(),
                    out_shardings=replicated)


class EventCSR(bp.dnn.Layer):
    """A projection as per-device CSR by presynaptic row, delivered event by event.

    ``sources``: the ``[k, n_post]`` source matrix of the index representation, split
    along the post axis; the CSR is built from it on each device (the same graph).
    ``mesh``: the 1-D ``neuron`` mesh, or ``None`` for one unsplit block.
    """

    def __init__(self, sources, n_pre, weight, mesh=None, chunk_fraction=CHUNK_FRACTION,
                 rows=None):
        super().__init__()
        if sources is not None:
            k, n_post = sources.shape
        else:  # rows = (n_post, k, key): draw each block's graph by row (random_rows)
            n_post, k, key = rows
        self.n_pre, self.n_post, self.weight, self.mesh = n_pre, n_post, weight, mesh
        self.devices = 1 if mesh is None else mesh.shape[NEURON]
        if n_post % self.devices:
            raise ValueError(
                f"{n_post} neurons do not split over {self.devices} devices"
            )
        self.n_local = n_post // self.devices
        self.chunk = chunk_size(k * self.n_local, chunk_fraction)
        if sources is not None:
            indptr, indices = _csr_builder(mesh, n_pre)(sources)
        else:
            cap = rows_capacity(k, self.n_local)
            indptr, indices = _rows_builder(mesh, n_pre, self.n_local, k, cap)(key)
        # the room for a random number of synapses must have sufficed
        if sources is None:
            # a replicated max over the blocks' ends: readable in every process
            most = int(jax.device_get(_most_synapses(mesh, self.devices)(indptr)))
            if most > cap:
                raise RuntimeError(f"a block drew {most} synapses, room for {cap}")
        # int32[devices * (n_pre + 1)]: does not shrink
        self.indptr = bm.Variable(indptr)
        # int32[k * n_post]: 1/devices on each device
        self.indices = bm.Variable(indices)
        self.shape = (n_pre, n_post)

    def update(self, spikes):
        fn = partial(deliver, n_local=self.n_local, chunk=self.chunk)
        if self.mesh is not None:
            fn = jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(NEURON), P(NEURON)),
                               out_specs=P(NEURON), check_vma=False)
        return fn(spikes, self.indptr.value, self.indices.value) * self.weight
