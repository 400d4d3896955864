"""Device setup for every notebook of the book.

JAX fixes the number of CPU devices when its XLA backend starts, and importing
``brainpy`` starts it.  So this module must be imported, and :func:`setup_devices`
called, before ``import brainpy`` or any JAX computation.  This module itself does
not start the backend until :func:`setup_devices` has set the device count.

Anchor: JAX docs, "Introduction to parallel programming" (simulating devices with
``jax_num_cpu_devices``) and ``jax.config`` option ``jax_num_cpu_devices``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_NUM_DEVICES = 8
ENV_VAR = "BOOK_NUM_DEVICES"


class DeviceSetupError(RuntimeError):
    """The device configuration the reader asked for is not the one JAX is running with."""


@dataclass(frozen=True)
class DeviceInfo:
    count: int
    platform: str
    simulated: bool
    kind: str

    def __str__(self) -> str:
        what = "simulated CPU devices" if self.simulated else f"{self.kind} device(s)"
        return f"{self.count} {what} (platform: {self.platform})"


def _backends_initialized() -> bool:
    from jax._src import xla_bridge

    if hasattr(xla_bridge, "backends_are_initialized"):  # JAX >= 0.4.36
        return xla_bridge.backends_are_initialized()
    return bool(getattr(xla_bridge, "_backends", {}))


def requested_cpu_devices(default: int = DEFAULT_NUM_DEVICES) -> int:
    """The number of simulated CPU devices asked for: ``$BOOK_NUM_DEVICES`` or ``default``."""
    raw = os.environ.get(ENV_VAR, str(default))
    try:
        n = int(raw)
    except ValueError:
        raise DeviceSetupError(f"{ENV_VAR}={raw!r} is not an integer; use e.g. {ENV_VAR}=4.") from None
    if n < 1:
        raise DeviceSetupError(f"{ENV_VAR}={n} must be at least 1.")
    return n


def setup_devices(default: int = DEFAULT_NUM_DEVICES, verbose: bool = True,
                  matmul_precision: str | None = "highest") -> DeviceInfo:
    """Configure devices before JAX starts, and check that the configuration took effect.

    * On a machine without an accelerator, JAX gets ``N`` simulated CPU devices:
      ``N = $BOOK_NUM_DEVICES`` if set, else ``default`` (8).
    * On GPUs or TPUs, all real devices are used, and ``N`` is ignored.

    * ``matmul_precision`` sets ``jax_default_matmul_precision``.  The book pins
      ``"highest"``: on recent NVIDIA GPUs float32 matmuls otherwise run in TF32 (JAX
      docs, "Matmul precision"), about 1e-3 relative, and the float32 tolerances of the
      equivalence checks are derived for full float32.  XLA:CPU computes float32
      matmuls in full precision either way.  Pass ``None`` to keep JAX's default.

    Calling it again in the same process is harmless when nothing changed.  If JAX
    already started with a different CPU device count (for example because
    ``import brainpy`` ran first), it raises :class:`DeviceSetupError`, which says
    how to fix it, instead of silently running on the wrong number of devices.
    """
    import jax

    n = requested_cpu_devices(default)
    started = _backends_initialized()
    if not started:
        # Only the CPU client reads this option; on a GPU machine it is harmless.
        jax.config.update("jax_num_cpu_devices", n)
    if matmul_precision is not None:
        jax.config.update("jax_default_matmul_precision", matmul_precision)
    devices = jax.devices()
    platform = devices[0].platform
    simulated = platform == "cpu"
    if simulated and len(devices) != n:
        raise DeviceSetupError(
            f"JAX is running with {len(devices)} CPU device(s), but {n} were requested. "
            "JAX fixes the device count when its backend starts, and `import brainpy` (or any "
            "JAX computation) starts it. Restart the kernel and run the device-setup cell "
            "first, before importing brainpy."
        )
    info = DeviceInfo(len(devices), platform, simulated, devices[0].device_kind)
    if verbose:
        print(f"JAX {jax.__version__}: {info}")
    return info


def mesh_shape_2d(n: int) -> tuple[int, int]:
    """A ``(batch, hidden)`` mesh shape for ``n`` devices: the largest divisor of ``n``
    that is at most ``sqrt(n)`` goes to ``batch``, the rest to ``hidden``.

    1 -> (1, 1), 2 -> (1, 2), 4 -> (2, 2), 6 -> (2, 3), 8 -> (2, 4); a prime p -> (1, p).
    """
    b = max(d for d in range(1, int(n**0.5) + 1) if n % d == 0)
    return b, n // b


def divisible_size(base: int, n: int) -> int:
    """``base`` if ``n`` divides it, else the smallest multiple of ``n`` above ``base``.

    The book's sizes (840 = lcm(1..8), 4200, ...) divide every device count from 1 to
    8, so the canonical outputs use them unchanged.  On a cluster with, say, 12 or 16
    devices this keeps a sharded axis divisible instead of failing with
    ``IndivisibleError``: 840 -> 840 on 12 devices, 848 on 16.
    """
    if base < 1 or n < 1:
        raise ValueError(f"sizes and device counts are positive, got base={base}, n={n}")
    return base if base % n == 0 else base + (n - base % n)
