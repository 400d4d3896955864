"""Push delivery: spike indices exchanged, only the rows of spiking neurons visited.

As NEST GPU's spike buffers and GeNN's "push" connectivity do it, with static shapes:

1. **compact**: each device puts the indices of its spiking neurons in a buffer of
   capacity ``C`` (:func:`spike_capacity`), padded with a sentinel;
2. **exchange**: the buffers are all-gathered, ``4 C`` bytes per device instead of a
   byte per neuron (about a tenth of it at the default capacity on large devices);
3. **push**: each device adds one count per synapse in the gathered ids' rows of its
   CSR (:func:`shardbook.coba.events.local_csr`); no pass over all sources.

Loops have static trip counts: ``jnp.nonzero(size=C)`` and ``S`` event slots
(:func:`event_capacity`) whose owners a fixed-depth binary search finds.  On the CPU,
``jax.lax.platform_dependent`` swaps in the exact :mod:`shardbook.coba.kernels`.

**Nothing is dropped silently**: devices count what did not fit, and :func:`check`
raises :class:`DeliveryOverflow` after the chunk.  No in-step fallback: a ``lax.cond``
on XLA:GPU waits for the host (``conditional_thunk.cc``), and an unconditional one is
the O(N_pre) pass itself.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import brainpy as bp
import brainpy.math as bm

from . import kernels
from .events import EventCSR
from .parameters import NEURON

__all__ = ["SPIKE_CAPACITY", "SIGMAS", "spike_capacity", "gathered_ids",
           "event_capacity", "capacities", "KERNELS",
           "DeliveryOverflow", "SpikeExchange", "PushCSR", "expand", "check",
           "compact_local", "push_local",
           "burst_stats", "counters"]

# Chapter 4's networks spiked at most 2.14 % of neurons in one step (the rest start's
# opening volley; 1.4 % after), hence 2.5 %; SIGMAS sqrt(mean) covers uneven splits.
SPIKE_CAPACITY = 0.025
SIGMAS = 6
# auto: the CPU kernels on a CPU, XLA elsewhere; xla: XLA always
KERNELS = ("auto", "xla")


class DeliveryOverflow(RuntimeError):
    """Spikes or events did not fit the delivery's static buffers: the run is wrong."""


def spike_capacity(n_local: int, fraction: float = SPIKE_CAPACITY) -> int:
    """Room for spike indices per device and step: ``fraction`` of ``n_local`` neurons
    plus :data:`SIGMAS` ``sqrt(mean)`` plus one; ValueError unless 0 < fraction <= 1."""
    if not 0 < fraction <= 1:
        raise ValueError(
            f"spike_capacity is a fraction of each device's neurons in (0, 1],"
            f" not {fraction}"
        )
    mean = fraction * n_local
    return int(min(n_local, np.ceil(mean + SIGMAS * np.sqrt(mean) + 1)))


def gathered_ids(n_exc: int, n_inh: int, devices: int,
                 fraction: float = SPIKE_CAPACITY) -> dict:
    """Int32 entries of the gathered buffers on every device, ``ids_exc`` and
    ``ids_inh``: ``devices`` times :func:`spike_capacity`; they do not shrink."""
    return dict(ids_exc=devices * spike_capacity(n_exc // devices, fraction),
                ids_inh=devices * spike_capacity(n_inh // devices, fraction))


def event_capacity(slots: int, mean_degree: float) -> int:
    """Event slots per device and step for the XLA expansion: ``slots`` times the mean
    local out-degree, plus :data:`SIGMAS` Poisson standard deviations, plus 16."""
    mean = slots * mean_degree
    return int(np.ceil(mean + SIGMAS * np.sqrt(mean) + 16))


def capacities(n_pre: int, n_local: int, k: int, devices: int,
               fraction: float = SPIKE_CAPACITY) -> tuple[int, int]:
    """``(slots, events)`` of one device's push step: room for the gathered spike ids
    of ``n_pre`` sources split ``devices`` ways, and for the events they make on its
    ``n_local`` targets of in-degree ``k`` (mean out-degree ``k n_local / n_pre``)."""
    slots = devices * spike_capacity(n_pre // devices, fraction)
    return slots, event_capacity(slots, k * n_local / n_pre)


def _kernel_ok(kernel: str) -> bool:
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, not {kernel!r}")
    return kernel == "auto" and kernels.available()


def _device_index(mesh):
    return jax.lax.axis_index(NEURON) if mesh is not None else 0


def _counter(mesh, devices: int):
    """int32[devices, 2] on the devices, one row each: (dropped, largest seen)."""
    zeros = np.zeros((devices, 2), np.int32)
    if mesh is None:
        return bm.Variable(jnp.asarray(zeros))
    return bm.Variable(
        jax.device_put(zeros, jax.sharding.NamedSharding(mesh, P(NEURON)))
    )


def _shard(fn, mesh, in_specs, out_specs):
    if mesh is None:
        return fn
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


def _tally(counter, dropped, seen):
    """Add ``dropped`` to the counter and keep the largest ``seen`` (both int32)."""
    return jnp.stack([counter[0, 0] + dropped, jnp.maximum(counter[0, 1], seen)])[None]


def compact_local(spikes, capacity: int, cpu_kernels: bool):
    """One device's spiking neurons: ``(ids int32[capacity], count int32)``; ids in
    order, then the sentinel ``len(spikes)``; ``count`` may exceed the capacity."""
    n_local = spikes.shape[0]

    def xla(s):
        ids = jnp.nonzero(s, size=capacity, fill_value=n_local)[0].astype(jnp.int32)
        return ids, jnp.sum(s, dtype=jnp.int32)

    def cpu(s):
        ids, count = kernels.compact(s, capacity)
        return ids, count[0]

    if cpu_kernels:  # decided while lowering: the CPU kernel on a CPU, XLA elsewhere
        return jax.lax.platform_dependent(spikes, cpu=cpu, default=xla)
    return xla(spikes)


def push_local(ids, indptr, indices, n_local: int, slots: int, cpu_kernels: bool):
    """One device's push: ``(counts float32[n_local], events int32, dropped int32)``."""
    def xla(ids, indptr, indices):
        counts, total = expand(ids, indptr, indices, n_local, slots)
        return counts, total, jnp.maximum(total - slots, 0).astype(jnp.int32)

    def cpu(ids, indptr, indices):  # exact: no slots to overflow
        counts, total = kernels.push(ids, indptr, indices, n_local)
        return counts, total[0], jnp.int32(0)

    if cpu_kernels:
        return jax.lax.platform_dependent(ids, indptr, indices, cpu=cpu, default=xla)
    return xla(ids, indptr, indices)


# region: coba.push.compact
class SpikeExchange(bp.dnn.Layer):
    """One population's spikes as indices: compacted on each device, all-gathered.

    Returns int32[devices * C]: the global indices of this step's spiking neurons,
    device by device, each block padded with the sentinel ``n`` (the population size).
    """

    def __init__(self, n: int, mesh=None, fraction: float = SPIKE_CAPACITY,
                 kernel: str = "auto"):
        super().__init__()
        self.n, self.mesh, self.fraction, self.kernel = n, mesh, fraction, kernel
        self.devices = 1 if mesh is None else mesh.shape[NEURON]
        if n % self.devices:
            raise ValueError(f"{n} neurons do not split over {self.devices} devices")
        self.n_local = n // self.devices
        self.capacity = spike_capacity(self.n_local, fraction)
        self.cpu_kernels = _kernel_ok(kernel)  # decided here, outside any trace
        self.counter = _counter(mesh, self.devices)  # (spikes dropped, largest burst)

    def _local(self, spikes, counter):
        ids, count = compact_local(spikes, self.capacity, self.cpu_kernels)
        offset = _device_index(self.mesh) * self.n_local
        ids = jnp.where(ids < self.n_local, ids + offset, self.n)  # global, or sentinel
        if self.mesh is not None:
            ids = jax.lax.all_gather(ids, NEURON, tiled=True)  # the exchange
        return ids, _tally(counter, jnp.maximum(count - self.capacity, 0), count)

    def update(self, spikes):  # spikes: bool[n], split along 'neuron'
        fn = _shard(self._local, self.mesh, (P(NEURON), P(NEURON)), (P(), P(NEURON)))
        ids, self.counter.value = fn(spikes, self.counter.value)
        return ids
# endregion


# region: coba.push.expand
def expand(ids, indptr, indices, n_local: int, slots: int):
    """XLA's push: counts of the ``n_local`` local neurons from the rows of ``ids``.

    ``slots`` event slots: slot ``p`` belongs to the id whose events span it (a
    binary search of fixed depth over the running sum of row lengths), and adds one
    to its target.  Returns ``(counts float32[n_local], events int32)``; events past
    ``slots`` are not delivered (the caller counts them).
    """
    n_pre = indptr.shape[0] - 1
    valid = ids < n_pre
    src = jnp.minimum(ids, n_pre - 1)
    start = indptr[src]
    degree = jnp.where(valid, indptr[src + 1] - start, 0)
    ends = jnp.cumsum(degree)                 # the events of id m end at ends[m]
    total = ends[-1]
    p = jnp.arange(slots, dtype=jnp.int32)
    owner = jnp.searchsorted(ends, p, side="right", method="scan_unrolled")
    owner = jnp.minimum(owner, ids.shape[0] - 1).astype(jnp.int32)
    syn = start[owner] + p - (ends[owner] - degree[owner])
    target = jnp.where(p < total, indices[jnp.clip(syn, 0, indices.shape[0] - 1)],
                       n_local)
    counts = jnp.zeros((n_local,), jnp.float32).at[target].add(1., mode="drop")
    return counts, total
# endregion


class PushCSR(EventCSR):
    """An :class:`EventCSR` delivered from a :class:`SpikeExchange`'s gathered ids."""

    def __init__(self, sources, n_pre, weight, mesh=None, rows=None,
                 fraction: float = SPIKE_CAPACITY, kernel: str = "auto"):
        super().__init__(sources, n_pre, weight, mesh, rows=rows)
        self.fraction, self.kernel = fraction, kernel
        k = sources.shape[0] if sources is not None else rows[1]
        self.slots, self.events = capacities(n_pre, self.n_local, k, self.devices,
                                             fraction)
        self.cpu_kernels = _kernel_ok(kernel)  # decided here, outside any trace
        self.counter = _counter(mesh, self.devices)  # (events dropped, largest step)

    def _local(self, ids, indptr, indices, counter):
        counts, total, dropped = push_local(ids, indptr, indices, self.n_local,
                                            self.events, self.cpu_kernels)
        return counts, _tally(counter, dropped, total)

    def update(self, ids):  # ids: int32[devices * C], the same on every device
        fn = _shard(self._local, self.mesh, (P(), P(NEURON), P(NEURON), P(NEURON)),
                    (P(NEURON), P(NEURON)))
        counts, self.counter.value = fn(ids, self.indptr.value, self.indices.value,
                                        self.counter.value)
        return counts * self.weight  # an integer count times the weight: exact


def counters(net) -> dict:
    """Every delivery counter of a network by name: ``{"E": SpikeExchange, ...}``."""
    out = {}
    for name, x in getattr(net, "exchanges", {}).items():
        out[name] = x
    for name, proj in net.projections.items():
        op = getattr(proj.comm, "op", None)
        if isinstance(op, PushCSR):
            out[name] = op
    return out


_REPLICATE: dict = {}


def _rows(objs) -> list[np.ndarray]:
    """The counters' rows, fetched together, replicated (readable in every process)."""
    values = [o.counter.value for o in objs]
    if not values:
        return []
    sharding = getattr(values[0], "sharding", None)
    if isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh.size > 1:
        mesh = sharding.mesh
        if mesh not in _REPLICATE:  # one compiled copy per mesh, reused every chunk
            _REPLICATE[mesh] = jax.jit(lambda *xs: xs, out_shardings=(
                jax.sharding.NamedSharding(mesh, P()),) * len(values))
        values = _REPLICATE[mesh](*values)
    return [np.asarray(v) for v in values]


def _summary(net) -> dict:
    objs = counters(net)
    rows = _rows(list(objs.values()))
    return {name: (int(r[:, 0].sum()), int(r[:, 1].max()), obj)
            for (name, obj), r in zip(objs.items(), rows)}


def burst_stats(net) -> dict:
    """``{name: (dropped, largest)}``: per population, the spikes that did not fit and
    the most spikes one device had in one step; per projection, the same for events."""
    return {
        name: (dropped, largest)
        for name, (dropped, largest, _) in _summary(net).items()
    }


def check(net) -> None:
    """Raise :class:`DeliveryOverflow` if any spike or event was dropped so far."""
    bad = []
    for name, (dropped, largest, obj) in _summary(net).items():
        if not dropped:
            continue
        if isinstance(obj, SpikeExchange):
            need = largest / obj.n_local
            bad.append(
                f"{name}: {dropped:,} spikes did not fit; one device had {largest:,} "
                f"spikes in one step, room for {obj.capacity:,} "
                f"(spike_capacity={obj.fraction:g}; {need:.3g} would have held it)"
            )
        else:
            bad.append(
                f"{name}: {dropped:,} synaptic events did not fit; one device had "
                f"{largest:,} in one step, room for {obj.events:,} (raise "
                f"spike_capacity, which sizes these slots too)"
            )
    if bad:
        raise DeliveryOverflow(
            "the push delivery dropped input, so this run is wrong from that step "
            "on:\n  " + "\n  ".join(bad)
            + "\nRebuild with a larger COBAHH(spike_capacity=...).")
