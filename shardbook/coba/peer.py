"""The peer: brainevent's event-driven CSR kernel, run on each device's own CSR.

brainevent 0.2.1 (the event library under BrainPy) multiplies a CSR matrix by a spike
vector with ``brainevent.binary_csrmv`` (numba on CPU, CUDA kernels on GPU).  Its
matrix class ``brainevent.CSR`` sizes a task workspace from the row pointers when it is
used (``brainevent/_csr/main.py``, ``_ensure_binary_workspace_and_get`` ->
``hybrid_task_capacity`` in ``_csr/hybrid_config.py``, which calls
``jax.device_get(indptr)``): under ``jax.shard_map`` each shard's row pointers are
traced, and that raises ``TracerArrayConversionError``.  The function
``binary_csrmv`` itself takes the workspace as an argument; with a workspace whose
capacity is static (a pytree with the capacity in its static part, :class:`Workspace`)
it accepts traced row pointers, and its numba kernel runs on each device's block.  The
capacity only sizes the CUDA "hybrid" kernel's task queue, which the CPU kernel never
reads, so :data:`CPU_ONLY`: this module drives brainevent on CPUs.

Its CPU kernel is called through a Python ``ctypes`` callback
(``brainevent/_op/numba_ffi.py``, ``NumbaCpuFfiHandler._ffi_callback``): each call takes
the GIL, so the calls of several simulated devices run one at a time.
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
    """Whether this module's brainevent path runs on ``device`` (its numba kernel: CPUs
    only, :data:`CPU_ONLY`), so that a timing can leave the peer out elsewhere."""
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
    """:class:`EventCSR`'s per-device CSR, delivered by brainevent's kernel per
    shard."""

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
