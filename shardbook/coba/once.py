"""Programs that run once per network (graph builders, summaries), compiled quickly.

On XLA:CPU, ``QUICK_OPTIONS`` skip LLVM's optimisations and use the older elemental IR
emitter: each cuts a third to a half of the compile.  Integer results do not change;
floats may differ in their last bits from an optimised compile (tests/test_once.py).
The choice depends only on global shapes, so every mesh and process makes the same one
and a network is the same on any of them.  Programs of ``QUICK_LIMIT`` elements or more
(inputs, outputs or ``work``), and every program on another platform, are optimised.
"""
from __future__ import annotations

import math
from types import MappingProxyType

import jax

__all__ = ["QUICK_LIMIT", "QUICK_OPTIONS", "compile_once", "once_jit"]

QUICK_LIMIT = 2_000_000  # elements in or out from which a program is compiled optimised
# Read-only: every process must choose alike, or a network differs between meshes.
QUICK_OPTIONS = MappingProxyType({
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
})


def compile_once(lowered: jax.stages.Lowered, work: int = 0) -> jax.stages.Compiled:
    """``lowered.compile()``, with ``QUICK_OPTIONS`` where quicker; ``work``: elements
    the program goes through beyond its inputs and outputs (a draw it reduces)."""
    size = max(work, *(sum(math.prod(x.shape) for x in jax.tree.leaves(info))
                       for info in (lowered.args_info, lowered.out_info)))
    if jax.default_backend() == "cpu" and size < QUICK_LIMIT:
        return lowered.compile(QUICK_OPTIONS)
    return lowered.compile()


class once_jit:
    """``jax.jit(fn, **kwargs)`` for a program that runs once per network: compiled
    by :func:`compile_once`, once per argument shapes, dtypes and shardings."""

    def __init__(self, fn, **jit_kwargs):
        self.jitted = jax.jit(fn, **jit_kwargs)
        self.compiled: dict = {}

    def __call__(self, *args):
        if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(args)):
            return self.jitted(*args)  # inside a trace: inlined, like jax.jit
        key = tuple((jax.numpy.shape(a), jax.numpy.result_type(a),
                     getattr(a, "sharding", None)) for a in args)
        if key not in self.compiled:
            self.compiled[key] = compile_once(self.jitted.lower(*args))
        return self.compiled[key](*args)
