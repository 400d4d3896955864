"""Programs that run once per network (graph builders, summaries), compiled quickly.

A builder runs once, so its compile time is most of its cost.  On XLA:CPU, skipping
LLVM's optimisations (``xla_backend_optimization_level=0``, an XLA debug option passed
as a compiler option of ``Lowered.compile``) halves the compile time of a small
program and changes no result: these programs compute integers and random bits, and
the same program is compiled the same way on every mesh.  A large one (inputs or
outputs of ``QUICK_LIMIT`` elements or more: its work grows with them) runs longer
than it compiles, so it keeps them, as does every program on another platform.
"""
from __future__ import annotations

import math

import jax

QUICK_LIMIT = 2_000_000  # elements in or out from which a program is compiled optimised


def compile_once(lowered: jax.stages.Lowered, work: int = 0) -> jax.stages.Compiled:
    """``lowered.compile()``, without LLVM's optimisations where that is quicker.

    ``work``: elements the program goes through where that is more than its inputs
    and outputs hold (a draw that it reduces)."""
    size = max(work, *(sum(math.prod(x.shape) for x in jax.tree.leaves(info))
                       for info in (lowered.args_info, lowered.out_info)))
    if jax.default_backend() == "cpu" and size < QUICK_LIMIT:
        return lowered.compile({"xla_backend_optimization_level": 0})
    return lowered.compile()


class once_jit:
    """``jax.jit(fn, **kwargs)`` for a program that runs once per network: compiled
    by :func:`compile_once`, once per argument shapes, dtypes and shardings."""

    def __init__(self, fn, **jit_kwargs):
        self.jitted = jax.jit(fn, **jit_kwargs)
        self.compiled: dict = {}

    def __call__(self, *args):
        key = tuple((jax.numpy.shape(a), jax.numpy.result_type(a),
                     getattr(a, "sharding", None)) for a in args)
        if key not in self.compiled:
            self.compiled[key] = compile_once(self.jitted.lower(*args))
        return self.compiled[key](*args)
