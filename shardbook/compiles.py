"""Count compilations through JAX's public monitoring events.

JAX records ``/jax/core/compile/backend_compile_duration`` (``jax.monitoring``) for
every XLA compilation; counting it while a block runs tells how often it compiled::

    with count_compiles() as compiled:
        step(xs, ys)
        step(xs, ys)
    compiled.count      # 1 if the second call reused the first program

Make the block's inputs before it: creating an array can compile a program of its own.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

__all__ = [
    "CompileCount",
    "count_compiles",
    "COMPILE_EVENT",
    "LOWER_EVENT",
]

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"


@dataclass
class CompileCount:
    """``count``: XLA compilations; ``lowerings``: programs lowered to StableHLO (a
    jit cache miss lowers again even when XLA then finds the same program compiled);
    ``seconds``: the time of each compilation."""

    count: int = 0
    lowerings: int = 0
    seconds: list = field(default_factory=list)

    def __int__(self) -> int:
        return self.count


@contextlib.contextmanager
def count_compiles():
    """Count the XLA compilations that happen while the block runs."""
    import jax.monitoring

    result = CompileCount()

    def listener(event: str, duration: float, **_):
        if event == COMPILE_EVENT:
            result.count += 1
            result.seconds.append(duration)
        elif event == LOWER_EVENT:
            result.lowerings += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield result
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
