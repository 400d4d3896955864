"""Event-driven connectivity that shards: a CSR per device, by presynaptic row.

Each device keeps its block's graph as CSR rows indexed by the *presynaptic* neuron
(``indptr``: n_pre + 1 row starts; ``indices``: local targets), and a step visits only
the rows of spiking neurons ("push") instead of every synapse ("pull", the index
matrix).  A ``lax.while_loop`` takes the events in chunks of ``chunk``: a burst costs
more chunks, and no event is dropped.  Inputs are integer counts (exact in float32)
times the weight, so the index matrix gives the same spikes.  Anchors: brainevent's
event CSR kernels, GeNN's "push".
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
    "chunk_size", "check_int32", "EventCSR"
]

CHUNK_FRACTION = 1 / 256  # a chunk covers this fraction of a device's synapses

INT32_MAX = 2**31 - 1   # the most synapses a device's int32 CSR can number


def check_int32(count: int, what: str) -> None:
    """``ValueError`` if ``count`` (per device) is more than int32 can number."""
    if count > INT32_MAX:
        raise ValueError(f"{count:,} {what} on one device: more than int32 row "
                         f"pointers hold ({INT32_MAX:,}); split the network over more "
                         "devices")


def local_csr(sources, n_pre):
    """One device's CSR by presynaptic row from its ``[k, B]`` block of sources;
    padding sources (``n_pre``) sort past ``indptr[n_pre]``, out of every row."""
    k, b = sources.shape
    pre = sources.reshape(-1)
    post = jnp.broadcast_to(jnp.arange(b, dtype=jnp.int32), (k, b)).reshape(-1)
    pre, post = jax.lax.sort((pre, post), num_keys=1, is_stable=True)
    rows = jnp.arange(n_pre + 1, dtype=jnp.int32)
    indptr = jnp.searchsorted(pre, rows, side="left").astype(jnp.int32)
    return indptr, post


def rows_capacity(k: int, n_local: int) -> int:
    """Static room for a block's synapses when their number is random (Poisson, mean k
    n_local): the mean plus 10 standard deviations plus 64."""
    mean = k * n_local
    return int(mean + 10 * np.sqrt(mean) + 64)


def random_rows(key, n_pre, n_local, k, capacity):
    """One block's graph drawn by presynaptic row, with no sort: source j gets
    Poisson(k n_local / n_pre) uniform targets, so each pair connects with probability
    about k / n_pre (Bernoulli up to double edges), k inputs per neuron on average."""
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
    """Spike counts of the ``n_local`` local neurons from the rows of the spiking
    sources; ``spikes``: bool[n_pre], the same on every device."""
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

    ``sources``: the ``[k, n_post]`` index matrix split along post (each device builds
    its CSR from its columns), or ``None`` with ``rows=(n_post, k, key)``
    (:func:`random_rows`).  ``mesh``: the 1-D ``neuron`` mesh, or ``None``.
    ``ValueError`` if ``n_post`` does not split over the mesh; ``RuntimeError`` if a
    block's random rows draw more synapses than their capacity (:func:`rows_capacity`).
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
        synapses = k * self.n_local
        self.chunk = chunk_size(synapses, chunk_fraction)
        # int32 row pointers, and event numbers that run one chunk past the last
        room = rows_capacity(k, self.n_local) if sources is None else synapses
        check_int32(max(room, synapses + self.chunk), "synapses of one projection")
        if sources is not None:
            indptr, indices = _csr_builder(mesh, n_pre)(sources)
        else:
            cap = rows_capacity(k, self.n_local)
            indptr, indices = _rows_builder(mesh, n_pre, self.n_local, k, cap)(key)
        if sources is None:  # the random synapses must fit (a replicated max)
            most = int(jax.device_get(_most_synapses(mesh, self.devices)(indptr)))
            if most > cap:
                raise RuntimeError(f"a block drew {most} synapses, room for {cap}")
        self.indptr = bm.Variable(indptr)  # int32[devices * (n_pre + 1)]: never shrinks
        self.indices = bm.Variable(indices)  # int32[k * n_post]: 1/devices per device
        self.shape = (n_pre, n_post)

    def update(self, spikes):
        fn = partial(deliver, n_local=self.n_local, chunk=self.chunk)
        if self.mesh is not None:
            fn = jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(NEURON), P(NEURON)),
                               out_specs=P(NEURON), check_vma=False)
        return fn(spikes, self.indptr.value, self.indices.value) * self.weight
