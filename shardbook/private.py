"""Every private internal of JAX, brainstate, Orbax and myst-nb that the book touches.

Where no public API does the job, the private one is used here and nowhere else
(``tests/test_private.py`` greps the repository).  Each function first checks that the
installed version is the pinned one, else fails with a message that names it.

1. :func:`gloo_on_loopback`: ``jax._src.distributed.global_state``,
   ``jax._src.xla_bridge`` (``register_backend_factory``, ``make_cpu_client``) and
   ``jax._src.lib._jax.make_gloo_tcp_collectives``.
2. :func:`cluster_types`, :func:`detector_variables`, :func:`detect_cluster`:
   ``jax._src.clusters``, read only.
3. :func:`orbax_reads_recorded`, :data:`ORBAX_KILL_BEFORE_COMMIT` (chapter 5b): Orbax's
   ``_read_array_index_and_device_put`` and ``AtomicRenameTemporaryPath.finalize``.
4. :func:`bm_jit_parts`, :func:`replace_state_values`: brainstate's jit wrapper
   (``StatefulFunction.get_state_trace``, ``jitted_fun``, ``State._value``), for
   :mod:`shardbook.gputarget`.
5. :func:`replace_mystnb_stream_merge`: myst-nb's ``render.coalesce_streams``
   (``_ext/site_fixes.py``).
6. :func:`hlo_bytes_accessed`: ``jaxlib._hlo.hlo_module_from_text`` and
   ``jaxlib._jax.hlo_module_cost_analysis``, to cost one computation of a program.

This module imports nothing from JAX at import time.
"""
from __future__ import annotations

import contextlib
import os
import re
from unittest import mock

__all__ = ["PINNED_JAX", "PINNED_ORBAX", "PINNED_BRAINSTATE", "PINNED_MYSTNB",
           "PrivateAPIError", "installed", "require", "require_jax",
           "gloo_on_loopback", "cluster_types", "detector_variables", "detect_cluster",
           "orbax_reads_recorded", "ORBAX_KILL_BEFORE_COMMIT", "bm_jit_parts",
           "replace_state_values",
           "replace_mystnb_stream_merge", "hlo_bytes_accessed"]

PINNED_JAX = "0.10.2"
PINNED_ORBAX = "0.12.8"
PINNED_BRAINSTATE = "0.5.4"
PINNED_MYSTNB = "1.4.0"


class PrivateAPIError(RuntimeError):
    """An installed package is not the version whose internals this code reads."""


def installed(package: str) -> str:
    """The installed version of ``package``."""
    from importlib.metadata import version

    return version(package)


def require(package: str, pinned: str, what: str) -> None:
    """Fail clearly unless ``package`` is at the ``pinned`` version."""
    have = installed(package)
    if have != pinned:
        raise PrivateAPIError(
            f"{what} uses private internals of {package} {pinned}, the version this "
            f"book pins (requirements.txt); {have} is installed. Install "
            f"{package}=={pinned}, or check shardbook/private.py against {package} "
            f"{have}.")


def require_jax(what: str) -> None:
    require("jax", PINNED_JAX, what)


# ----------------------------------------------------------------------- 1. Gloo
def gloo_on_loopback(address: str = "127.0.0.1") -> None:
    """Make the CPU collectives between processes (Gloo over TCP) listen on ``address``,
    not on the host name's (perhaps public) address: JAX 0.10.2 has no option for it.
    Call after ``jax.distributed.initialize``, before the backend starts."""
    require_jax("gloo_on_loopback")
    from jax._src import distributed, xla_bridge
    from jax._src.lib import _jax

    def cpu_client():
        gloo = _jax.make_gloo_tcp_collectives(
            distributed_client=distributed.global_state.client, hostname=address)
        return xla_bridge.make_cpu_client(collectives=gloo)

    xla_bridge.register_backend_factory(
        "cpu", cpu_client, priority=0, fail_quietly=False
    )


# ------------------------------------------------------------ 2. cluster detection
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMIX_", "JAX_COORD")


def cluster_types() -> list[tuple[str, bool]]:
    """(name, opt-in only) of each cluster detector, in the order JAX tries them."""
    require_jax("cluster_types")
    from jax._src import clusters

    return [
        (c.__name__, bool(c.opt_in_only_method))
        for c in clusters.ClusterEnv._cluster_types
    ]


def detector_variables() -> dict[str, list[str]]:
    """The environment variables that JAX's SLURM and Open MPI detectors read."""
    require_jax("detector_variables")
    import inspect

    from jax._src.clusters import ompi_cluster, slurm_cluster

    def names(module, cls):
        used = inspect.getsource(cls)
        return [
            v
            for k, v in vars(module).items()
            if k.startswith("_")
            and k[1:].isupper()
            and isinstance(v, str)
            and k in used
        ]

    return {"SLURM": names(slurm_cluster, slurm_cluster.SlurmCluster),
            "Open MPI": names(ompi_cluster, ompi_cluster.OmpiCluster)}


def detect_cluster(env: dict, method: str | None = None):
    """What ``jax.distributed.initialize()`` would use with launcher variables ``env``:
    (coordinator_address, num_processes, process_id, local_device_ids).  This process's
    own launcher variables are hidden; nothing is started."""
    require_jax("detect_cluster")
    from jax._src import clusters

    keep = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES)}
    with mock.patch.dict(os.environ, {**keep, **env}, clear=True):
        return clusters.ClusterEnv.auto_detect_unset_distributed_params(
            None, None, None, None, method, 300)


# ------------------------------------------------------------------- 3. Orbax
@contextlib.contextmanager
def orbax_reads_recorded():
    """Record each host buffer Orbax reads into: ``(shape, devices it is put on)``."""
    require("orbax-checkpoint", PINNED_ORBAX, "orbax_reads_recorded")
    from orbax.checkpoint._src.serialization import serialization

    reads, original = [], serialization._read_array_index_and_device_put

    async def spy(devices, *args, new_shard_shape, **kwargs):
        reads.append((tuple(new_shard_shape), len(devices)))
        return await original(devices, *args, new_shard_shape=new_shard_shape, **kwargs)

    serialization._read_array_index_and_device_put = spy
    try:
        yield reads
    finally:
        serialization._read_array_index_and_device_put = original


ORBAX_KILL_BEFORE_COMMIT = f'''
import os, signal
from importlib.metadata import version
assert version("orbax-checkpoint") == "{PINNED_ORBAX}", (
    "this demonstration patches Orbax {PINNED_ORBAX} internals; "
    + version("orbax-checkpoint") + " is installed")
from orbax.checkpoint._src.path import atomicity

finalize = atomicity.AtomicRenameTemporaryPath.finalize
async def killed_before_commit(self):
    if self.get_final().name.isdigit():      # the step directory: die, not commit
        os.kill(os.getpid(), signal.SIGKILL)
    await finalize(self)                     # the item inside it finalizes as usual
atomicity.AtomicRenameTemporaryPath.finalize = killed_before_commit
'''
"""Python source that makes the next Orbax save die just before its commit (5b)."""


# -------------------------------------------------------------- 4. brainstate's jit
def bm_jit_parts(step, *args):
    """``(jitted, states, values)`` of a ``bm.jit`` function called with ``args``:
    the plain ``jax.jit`` of ``(state_values, *args)`` inside it, the brainstate states
    the step reads and writes, and their current values, in the same order.
    """
    require("brainstate", PINNED_BRAINSTATE, "bm_jit_parts")
    trace = step.stateful_fun.get_state_trace(*args)
    return step.jitted_fun, list(trace.states), list(trace.get_state_values())


def replace_state_values(step, args, make) -> list:
    """Give every state of ``step`` the value ``make(state, old_value)``, for good.

    To trace at another size than built, ``make`` returns a zero-memory stand-in
    (``np.broadcast_to``).  Clears the trace cache; returns the states.  The model
    cannot run afterwards."""
    require("brainstate", PINNED_BRAINSTATE, "replace_state_values")
    states = list(step.stateful_fun.get_state_trace(*args).states)
    for state in states:
        state._value = make(state, state._value)
    step.stateful_fun.clear_cache()
    return states


# ------------------------------------------------------------------- 5. myst-nb
def replace_mystnb_stream_merge(merge) -> None:
    """Make myst-nb merge a cell's stream outputs with ``merge(outputs)``."""
    require("myst-nb", PINNED_MYSTNB, "replace_mystnb_stream_merge")
    import myst_nb.core.render as render

    if not hasattr(render, "coalesce_streams"):
        raise PrivateAPIError("myst_nb.core.render.coalesce_streams is gone")
    render.coalesce_streams = merge


# ------------------------------------------------------------ 6. XLA's cost analysis
def hlo_bytes_accessed(text: str, entry: str | None = None) -> float:
    """XLA's cost analysis ("bytes accessed") of the HLO module ``text``, on the CPU
    client, counted from computation ``entry`` (default: the module's own entry).

    ``Compiled.cost_analysis()`` counts from the entry only, so a ``while`` body counts
    once beside everything XLA hoisted out of the loop.  To cost the body alone, the
    text is parsed again with ``entry`` marked as the entry computation."""
    require_jax("hlo_bytes_accessed")
    import jax
    from jaxlib import _hlo, _jax

    if entry is not None:
        head = re.compile(r"^%?" + re.escape(entry.lstrip("%")) + r" \(")
        lines = [ln[6:] if ln.startswith("ENTRY ") else ln for ln in text.splitlines()]
        found = [i for i, ln in enumerate(lines) if head.match(ln)]
        if len(found) != 1:
            raise ValueError(f"no computation {entry!r} in this program")
        lines[found[0]] = "ENTRY " + lines[found[0]]
        text = "\n".join(lines)
    module = _hlo.hlo_module_from_text(text)
    cost = _jax.hlo_module_cost_analysis(jax.devices("cpu")[0].client, module)
    return float(cost["bytes accessed"])
