"""Device setup for every notebook of the book.

JAX fixes the CPU device count when its backend starts, and ``import brainpy`` starts
it: call :func:`setup_devices` first (JAX docs, "Introduction to parallel programming").
Importing this module does not start the backend.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_NUM_DEVICES = 8
ENV_VAR = "BOOK_NUM_DEVICES"

__all__ = ["DeviceSetupError", "DeviceInfo", "setup_devices", "lesson_devices",
           "speed_devices", "cpu_devices", "requested_cpu_devices", "mesh_shape_2d",
           "divisible_size"]


class DeviceSetupError(RuntimeError):
    """The devices asked for are invalid, or not those JAX runs with."""


@dataclass(frozen=True)
class DeviceInfo:
    """What :func:`setup_devices` set up: ``devices`` for the lessons (all accelerators
    if two or more, else ``count`` simulated CPUs), ``speed_devices`` for timings (the
    accelerators if any, else the same CPUs)."""

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
        """True when the lessons run on simulated CPUs beside a lone accelerator."""
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
    """The devices the lessons run on (:class:`DeviceInfo`), which every mesh of the
    book spans.  Before :func:`setup_devices` has run: ``jax.devices()``."""
    if "info" in _STATE:
        return list(_STATE["info"].devices)
    import jax

    return list(jax.devices())


def speed_devices() -> list:
    """The devices timings run on: the accelerators when there are any."""
    if "info" in _STATE:
        return list(_STATE["info"].speed_devices)
    return lesson_devices()


def cpu_devices() -> list:
    """XLA:CPU's devices, on any machine: for what a page compiles for the CPU on
    purpose (pages 2c, 4b and 5a).  Raises :class:`DeviceSetupError`, saying how to
    fix it, when JAX runs without its CPU backend (``JAX_PLATFORMS=cuda``)."""
    import jax

    try:
        return list(jax.devices("cpu"))
    except RuntimeError:
        raise DeviceSetupError(
            "This page compiles small programs for the CPU (XLA:CPU), but JAX runs "
            "without its CPU backend. Add cpu to JAX_PLATFORMS (e.g. "
            "JAX_PLATFORMS=cuda,cpu) and restart the kernel.") from None


def requested_cpu_devices(default: int = DEFAULT_NUM_DEVICES) -> int:
    """The simulated CPU devices asked for: ``$BOOK_NUM_DEVICES`` or ``default``.
    Raises :class:`DeviceSetupError` unless that is an integer of at least 1."""
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
    """Configure devices before JAX starts, and check that it took effect.

    JAX's CPU backend gets ``N`` simulated devices (``$BOOK_NUM_DEVICES``, else
    ``default``); lessons and timings run there, unless there are accelerators.  Two or
    more (or no CPU backend) take both and ``N`` is ignored; a lone one (which shows no
    split) takes the timings only, and the first CPU device becomes
    ``jax_default_device``.  ``matmul_precision`` sets ``jax_default_matmul_precision``
    (``None``: JAX's default); the book pins ``"highest"``, as the equivalence checks'
    tolerances assume full float32, not recent NVIDIA GPUs' TF32.  ``probe`` (for tests)
    replaces the function that returns ``(default backend's devices, CPU devices or
    None)``.

    Calling it again is harmless when nothing changed.  Raises
    :class:`DeviceSetupError`, saying how to fix it, if JAX already started with another
    CPU device count (e.g. ``import brainpy`` ran first).

    Long because: each way the setup can go wrong (too late, too few devices, one
    accelerator) is checked where it happens and named in its error.
    """
    import jax

    n = requested_cpu_devices(default)
    try:
        # Only the CPU client reads it (on a GPU machine: the CPUs beside the GPUs).
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
    """A ``(batch, hidden)`` mesh shape for ``n`` devices: ``batch`` is the largest
    divisor of ``n`` up to ``sqrt(n)``.  8 -> (2, 4), 6 -> (2, 3), prime p -> (1, p)."""
    b = max(d for d in range(1, int(n**0.5) + 1) if n % d == 0)
    return b, n // b


def divisible_size(base: int, n: int) -> int:
    """``base`` if ``n`` divides it, else the smallest multiple of ``n`` above ``base``.

    The book's sizes (840, 4200...) divide every count 1..8; on 16 devices, 840 -> 848.
    Raises ``ValueError`` unless both are positive."""
    if base < 1 or n < 1:
        raise ValueError(
            f"sizes and device counts are positive, got base={base}, n={n}"
        )
    return base if base % n == 0 else base + (n - base % n)
