"""CPU kernels of the push delivery, called by XLA without Python in between.

XLA:CPU runs irregular code slowly (a scatter or a ``jnp.cumsum``: about 10 ns per
element), so a static-shape event expansion pays for its whole capacity every step.
brainevent's numba kernels avoid that, but through a Python ``ctypes`` callback: about
16 us and the GIL per call.  Here each kernel is a numba ``cfunc`` that *is* an XLA
typed-FFI handler (:mod:`shardbook.coba.ffi_handlers`): XLA calls machine code
directly, about 0.1 us, no GIL.  :func:`compact` and :func:`push` are exact and cost
what happened, not a capacity.  Where :func:`available` is False (registration or
self-test failed), the push delivery uses its XLA path.
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np

__all__ = ["available", "why_not", "compact", "push", "api_version", "KernelError",
           "FFI_PREFIX",
           "build_handlers", "register", "version_problem"]


# the XLA FFI targets of the two kernels are this prefix + "compact" / "push"
FFI_PREFIX = "shardbook_coba_"


class KernelError(RuntimeError):
    """The CPU kernels could not be registered on this machine."""


def api_version() -> tuple[int, int]:
    """``(major, minor)`` of the XLA FFI C API that this jaxlib ships (its header)."""
    import jax

    header = Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    text = header.read_text()
    found = [re.search(rf"#define XLA_FFI_API_{part} (\d+)", text)
             for part in ("MAJOR", "MINOR")]
    if None in found:
        raise KernelError(f"{header} defines no XLA_FFI_API_MAJOR/MINOR")
    return int(found[0].group(1)), int(found[1].group(1))


_STATE: dict = {}


def build_handlers():
    """The two handlers, compiled by numba (``ffi_handlers``, cached on disk), and the
    C API version they answer XLA's handshake with: ``({name: cfunc}, version)``."""
    from . import ffi_handlers

    return ({"compact": ffi_handlers.compact, "push": ffi_handlers.push},
            ffi_handlers.API_VERSION)


def version_problem(tested: tuple[int, int]) -> str | None:
    """Why handlers checked against C API ``tested`` must not be registered with this
    jaxlib (``None``: they may)."""
    if api_version() == tuple(tested):
        return None
    return (f"XLA FFI C API {api_version()} is not the one whose layout these "
            f"kernels were checked against ({tuple(tested)}): the push delivery uses "
            "its XLA path")


def register() -> str | None:
    """Build, register and self-test the handlers: ``None`` if that worked, else why
    not (nothing is registered on a mismatching C API).  :func:`available` calls it."""
    import jax

    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return "the call-frame offsets assume 64-bit pointers"
    try:
        funcs, tested = build_handlers()
        problem = version_problem(tested)
        if problem:
            return problem
        for name, fn in funcs.items():
            capsule = jax.ffi.pycapsule(ctypes.cast(fn.address, ctypes.c_void_p).value)
            jax.ffi.register_ffi_target(
                f"{FFI_PREFIX}{name}", capsule, platform="cpu"
            )
        _STATE["funcs"] = funcs  # keep the machine code alive while XLA may call it
        _self_test()
        return None
    except Exception as err:  # a numba or jaxlib this layout does not fit
        return f"{type(err).__name__}: {err}"


def _self_test():
    """The kernels against numpy on a small case, through jit on the CPU."""
    import jax
    import jax.numpy as jnp

    with jax.ensure_compile_time_eval():  # also when first asked inside a trace
        _check_kernels(jax, jnp)


def _check_kernels(jax, jnp):
    rng = np.random.default_rng(0)
    spikes = rng.random(50) < 0.3
    cpu = jax.devices("cpu")[0]

    def put(x):
        return jax.device_put(np.asarray(x), cpu)
    ids, count = jax.jit(lambda s: compact(s, 8))(put(spikes))
    want = np.flatnonzero(spikes)
    if int(count[0]) != want.size or not np.array_equal(
            np.asarray(ids), np.concatenate([want, np.full(8, 50)])[:8]):
        raise KernelError("compact disagrees with numpy")
    indptr = np.array([0, 2, 2, 5], np.int32)
    indices = np.array([1, 0, 3, 1, 1], np.int32)
    got, events = jax.jit(lambda i, p, x: push(i, p, x, 4))(
        put(np.array([2, 0, 3, 3], np.int32)), put(indptr), put(indices))
    if int(events[0]) != 5 or not np.array_equal(np.asarray(got),
                                                 np.array([1, 3, 0, 1], np.float32)):
        raise KernelError("push disagrees with numpy")


def available() -> bool:
    """True when the CPU kernels are registered with XLA and passed their self-test."""
    if "ok" not in _STATE:
        _STATE["ok"] = False  # no recursion from the self-test
        _STATE["error"] = "registering (the self-test runs)"
        _STATE["error"] = register()
        _STATE["ok"] = _STATE["error"] is None
    return _STATE["ok"]


def why_not() -> str | None:
    """Why :func:`available` is False (``None`` when it is True)."""
    return None if available() else _STATE.get("error") or "not registered"


def compact(spikes, capacity: int):
    """``(ids int32[capacity], count int32[1])``: a bool vector's true indices in order,
    padded with ``len(spikes)``, and how many there are (CPU only)."""
    import jax
    import jax.numpy as jnp

    out = (
        jax.ShapeDtypeStruct((capacity,), jnp.int32),
        jax.ShapeDtypeStruct((1,), jnp.int32),
    )
    return jax.ffi.ffi_call(FFI_PREFIX + "compact", out, vmap_method="sequential")(
        spikes
    )


def push(ids, indptr, indices, n_local: int):
    """``(counts float32[n_local], events int32[1])``: one count per synapse of each
    valid source id, and the number of those synapses (CPU only)."""
    import jax
    import jax.numpy as jnp

    out = (
        jax.ShapeDtypeStruct((n_local,), jnp.float32),
        jax.ShapeDtypeStruct((1,), jnp.int32),
    )
    return jax.ffi.ffi_call(FFI_PREFIX + "push", out, vmap_method="sequential")(
        ids, indptr, indices)
