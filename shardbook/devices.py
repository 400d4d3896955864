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

__all__ = ["DeviceSetupError", "DeviceInfo", "setup_devices", "lesson_devices",
           "speed_devices", "requested_cpu_devices", "mesh_shape_2d", "divisible_size"]


class DeviceSetupError(RuntimeError):
    """The device configuration the reader asked for is not the one JAX is running
    with."""


@dataclass(frozen=True)
class DeviceInfo:
    """What :func:`setup_devices` set up.

    ``devices`` are the devices the lessons run on (layouts, memory, collectives): all
    accelerators when there are two or more, else ``count`` simulated CPU devices.
    ``speed_devices`` are the devices that timings run on: the accelerators when there
    are any, else the same CPU devices.
    """

    count: int
    platform: str
    simulated: bool
    kind: str
    devices: tuple = ()
    speed_devices: tuple = ()

    @property
    def speed_platform(self) -> str:
        return self.speed_devices[0].platform if self.speed_devices else self.platform

    @property
    def split_on_cpu(self) -> bool:
        """True when the lessons run on simulated CPU devices beside a lone
        accelerator."""
        return self.simulated and self.speed_platform != "cpu"

    def __str__(self) -> str:
        what = "simulated CPU devices" if self.simulated else f"{self.kind} device(s)"
        text = f"{self.count} {what} (platform: {self.platform})"
        if self.split_on_cpu:
            speed = self.speed_devices[0]
            text = (f"lessons on {text}; timings on {len(self.speed_devices)} "
                    f"{speed.device_kind} ({speed.platform})")
        return text


_STATE: dict = {}


def _probe():
    """(the default backend's devices, the CPU devices or None): what JAX found."""
    import jax

    default = list(jax.devices())
    try:
        cpu = list(jax.devices("cpu"))
    except RuntimeError:  # JAX_PLATFORMS names accelerators only
        cpu = None
    return default, cpu


def lesson_devices() -> list:
    """The devices the lessons run on (see :class:`DeviceInfo`); every mesh of the book
    is built over these.  Before :func:`setup_devices` has run: ``jax.devices()``."""
    if "info" in _STATE:
        return list(_STATE["info"].devices)
    import jax

    return list(jax.devices())


def speed_devices() -> list:
    """The devices timings run on: the accelerators when there are any."""
    if "info" in _STATE:
        return list(_STATE["info"].speed_devices)
    return lesson_devices()


def requested_cpu_devices(default: int = DEFAULT_NUM_DEVICES) -> int:
    """The number of simulated CPU devices asked for: ``$BOOK_NUM_DEVICES`` or
    ``default``."""
    raw = os.environ.get(ENV_VAR, str(default))
    try:
        n = int(raw)
    except ValueError:
        raise DeviceSetupError(
            f"{ENV_VAR}={raw!r} is not an integer; use e.g. {ENV_VAR}=4.") from None
    if n < 1:
        raise DeviceSetupError(f"{ENV_VAR}={n} must be at least 1.")
    return n


def setup_devices(default: int = DEFAULT_NUM_DEVICES, verbose: bool = True,
                  matmul_precision: str | None = "highest", probe=None) -> DeviceInfo:
    """Configure devices before JAX starts, and check that the configuration took
    effect.

    * JAX's CPU backend gets ``N`` simulated devices: ``N = $BOOK_NUM_DEVICES`` if set,
      else ``default`` (8).  JAX reads ``jax_num_cpu_devices`` once, when its backends
      start (JAX docs, "Introduction to parallel programming").
    * With two or more GPUs or TPUs, the lessons and the timings use all of them, and
      ``N`` is ignored.
    * With one accelerator (Colab's T4, a laptop GPU), one device would show no split at
      all.  So the lessons (layouts, memory, collectives) run on the ``N`` simulated CPU
      devices beside it (``jax.devices("cpu")``; ``jax_default_device`` is set to the
      first of them, so new arrays go there too), and the timings on the accelerator
      (``speed_devices``).
    * ``matmul_precision`` sets ``jax_default_matmul_precision``.  The book pins
      ``"highest"``: on recent NVIDIA GPUs float32 matmuls otherwise run in TF32 (JAX
      docs, "Matmul precision"), about 1e-3 relative, and the float32 tolerances of the
      equivalence checks are derived for full float32.  ``None`` keeps JAX's default.

    Calling it again in the same process is harmless when nothing changed.  If JAX
    already started with a different CPU device count (for example because
    ``import brainpy`` ran first), it raises :class:`DeviceSetupError`, which says how
    to fix it, instead of silently running on the wrong number of devices.

    ``probe`` (for tests) replaces the function that lists what JAX found: it returns
    ``(the default backend's devices, the CPU devices or None)``.

    Long because: each way the setup can go wrong (too late, too few devices, one
    accelerator) is checked where it happens and named in its error.
    """
    import jax

    n = requested_cpu_devices(default)
    try:
        # Only the CPU client reads this option; on a GPU machine it sizes the CPU
        # devices beside the GPUs.  Once the backends have started, JAX refuses it.
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        pass  # already started: the count check below says whether that matters
    if matmul_precision is not None:
        jax.config.update("jax_default_matmul_precision", matmul_precision)
    default_devs, cpu = (probe or _probe)()
    accelerators = [d for d in default_devs if d.platform != "cpu"]
    if len(accelerators) >= 2 or (accelerators and cpu is None):
        lessons = speed = accelerators
    else:
        lessons = cpu if cpu is not None else default_devs
        if len(lessons) != n:
            raise DeviceSetupError(
                f"JAX is running with {len(lessons)} CPU device(s), but {n} were "
                "requested. JAX fixes the device count when its backend starts, and "
                "`import brainpy` (or any JAX computation) starts it. Restart the "
                "kernel and run the device-setup cell first, before importing brainpy.")
        speed = accelerators or lessons
        if accelerators:  # new arrays go where the lessons run
            jax.config.update("jax_default_device", lessons[0])
    first = lessons[0]
    info = DeviceInfo(len(lessons), first.platform, first.platform == "cpu",
                      first.device_kind, tuple(lessons), tuple(speed))
    _STATE["info"] = info
    if verbose:
        print(f"JAX {jax.__version__}: {info}")
    return info


def mesh_shape_2d(n: int) -> tuple[int, int]:
    """A ``(batch, hidden)`` mesh shape for ``n`` devices: the largest divisor of ``n``
    that is at most ``sqrt(n)`` goes to ``batch``, the rest to ``hidden``.

    1 -> (1, 1), 2 -> (1, 2), 4 -> (2, 2), 6 -> (2, 3), 8 -> (2, 4); a prime p -> (1,
    p).
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
        raise ValueError(
            f"sizes and device counts are positive, got base={base}, n={n}"
        )
    return base if base % n == 0 else base + (n - base % n)
