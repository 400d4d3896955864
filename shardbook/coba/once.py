"""Programs that run once per network (graph builders, summaries), compiled quickly.

A builder runs once, so its compile time is most of its cost.  On XLA:CPU,
``QUICK_OPTIONS`` (XLA debug options, passed as compiler options of
``Lowered.compile``) skip LLVM's optimisations (``xla_backend_optimization_level=0``:
a third to a half off the compile, measured on this book's builders and generators),
and emit the fusions with XLA:CPU's older elemental IR emitter instead of its MLIR
fusion emitters (``xla_cpu_use_fusion_emitters=False``: a third to a half of what is
left, measured on the initial-state generator).  The second option also changes the
optimised HLO a little: a lone instruction is no longer wrapped in a fusion of its own.
Integer results (graphs, counts, hashes) do not change.  Float results may
differ in their last bits from an optimised compile (the normal draws of the initial
state do, and were compiled at level 0 from the start; adding the second option
changed none of their bits, on 1, 3 and 8 devices when it was made, and on 1 and 4 in
tests/test_once.py): the choice depends only on the
program's global shapes, so every mesh and every process makes the same one, and a
network is the same network on any of them.  A large program (inputs, outputs or
``work`` of ``QUICK_LIMIT`` elements or more) runs longer than it compiles, so it keeps
LLVM's optimisations, as does every program on another platform.
"""
from __future__ import annotations

import math
from types import MappingProxyType

import jax

__all__ = ["QUICK_LIMIT", "QUICK_OPTIONS", "compile_once", "once_jit"]

QUICK_LIMIT = 2_000_000  # elements in or out from which a program is compiled optimised
# XLA:CPU debug options of a quick compile (see above). Read-only: every builder, in
# every process, must make the same choice, or a network differs between meshes.
QUICK_OPTIONS = MappingProxyType({
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
})


def compile_once(lowered: jax.stages.Lowered, work: int = 0) -> jax.stages.Compiled:
    """``lowered.compile()``, with ``QUICK_OPTIONS`` where that is quicker.

    ``work``: elements the program goes through where that is more than its inputs
    and outputs hold (a draw that it reduces)."""
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
