"""The peer: brainevent's event-driven CSR kernel, run on each device's own CSR.

brainevent 0.2.1's ``brainevent.CSR`` sizes a task workspace with
``jax.device_get(indptr)`` (``_csr/hybrid_config.py``), which fails on a shard's traced
row pointers under ``jax.shard_map``; ``brainevent.binary_csrmv`` accepts them given a
workspace of static capacity (:class:`Workspace`).  That capacity only sizes the CUDA
kernel's task queue, so this module drives brainevent on CPUs only (:data:`CPU_ONLY`),
where each call takes the GIL through a Python ``ctypes`` callback.
"""
from __future__ import annotations

from collections import namedtuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .events import EventCSR
from .parameters import NEURON

__all__ = ["CPU_ONLY", "Workspace", "workspace", "deliver", "BrainEventCSR", "runs_on"]

CPU_ONLY = True


def runs_on(device) -> bool:
    """Whether the brainevent path runs on ``device`` (CPUs only: :data:`CPU_ONLY`)."""
    return not CPU_ONLY or device.platform == "cpu"


@jax.tree_util.register_pytree_node_class
class Workspace(namedtuple("Workspace", "task_capacity task_begin task_end status")):
    """The task workspace ``binary_csrmv`` expects, with a static capacity."""

    def tree_flatten(self):
        return (self.task_begin, self.task_end, self.status), self.task_capacity

    @classmethod
    def tree_unflatten(cls, capacity, children):
        return cls(capacity, *children)


def workspace(dtype=jnp.int32) -> Workspace:
    """An empty workspace: the CPU kernel reads none of it."""
    empty = jnp.zeros((0,), dtype)
    return Workspace(0, empty, empty, jnp.zeros((2,), jnp.int32))


def deliver(spikes, indptr, indices, n_local: int):
    """Spike counts of the ``n_local`` local neurons: brainevent's numba kernel on this
    device's CSR (rows: every presynaptic neuron; columns: the local block)."""
    import brainevent

    n_pre = indptr.shape[0] - 1
    return brainevent.binary_csrmv(jnp.ones((1,), jnp.float32), indices, indptr, spikes,
                                   shape=(n_pre, n_local), workspace=workspace(),
                                   transpose=True, backend="numba")


class BrainEventCSR(EventCSR):
    """:class:`EventCSR`, delivered by brainevent's kernel on each shard."""

    def update(self, spikes):  # spikes: bool[n_pre], the same on every device
        def local(s, indptr, indices):
            return deliver(s, indptr, indices, self.n_local)

        fn = local
        if self.mesh is not None:
            fn = jax.shard_map(
                local,
                mesh=self.mesh,
                in_specs=(P(), P(NEURON), P(NEURON)),
                out_specs=P(NEURON),
                check_vma=False,
            )
        return fn(spikes, self.indptr.value, self.indices.value) * self.weight
