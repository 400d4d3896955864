"""The chapter configurations: every size and mesh a chapter uses, in one place.

A size that a mesh axis splits must divide by that axis.  The book's sizes are multiples
of 840 = lcm(1..8), so 1 to 8 devices (the canonical outputs use 8) take them unchanged;
on other counts :func:`config` rounds each split size up to a multiple of its axis
(:func:`shardbook.devices.divisible_size`).  Every notebook, test and script takes its
sizes from here::

    cfg = config("ch3")            # for the devices the lessons run on
    cfg.H, cfg.B, cfg.mesh_2d      # 840, 8, (2, 4) on 8 devices
    config("ch3", n=32).H          # 864: 32 divides it

This module imports neither JAX nor BrainPy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .devices import divisible_size, mesh_shape_2d

__all__ = ["Config", "config", "CHAPTERS"]


@dataclass(frozen=True)
class Config:
    """One chapter's sizes for ``n`` devices.  Read sizes as attributes (``cfg.H``)."""

    name: str
    n: int
    values: dict = field(default_factory=dict)
    why: str = ""

    def __getattr__(self, key):
        values = object.__getattribute__(self, "values")
        if key in values:
            return values[key]
        raise AttributeError(
            f"configuration {object.__getattribute__(self, 'name')!r} has no size "
            f"{key!r}; "
            f"it has {', '.join(values)}")

    def asdict(self) -> dict:
        """The sizes as a plain dict (for keyword arguments and JSON)."""
        return dict(self.values)

    def changed(self) -> dict:
        """The sizes that differ from the canonical ones (those of 8 devices)."""
        base = config(self.name, 8).values
        return {k: v for k, v in self.values.items() if base.get(k) != v}

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        return f"Config({self.name!r}, n={self.n}: {body})"


def _lesson_count() -> int:
    from .devices import lesson_devices

    return len(lesson_devices())


# Each chapter's sizes as a function of the device count n.  B batch, T time steps,
# I inputs, H hidden units, O outputs.
def _ch1(n):
    # time: exercise 1 splits it n ways; square: over the 2-D mesh (rows x cols = n)
    return dict(rows=divisible_size(16, n), cols=6, batch=divisible_size(840, n),
                time=divisible_size(840, n), feature=3, square=divisible_size(840, n))


def _ch2(n):      # data parallelism: the batch split n ways
    return dict(B=divisible_size(840, n), T=50, I=4, H=32, O=2, lr=1e-2)


def _ch3(n):      # the hidden axis split n ways (1-D), or (b, h) ways (2-D)
    b, h = mesh_shape_2d(n)
    return dict(B=divisible_size(8, b), T=20, I=8, H=divisible_size(840, n), O=8,
                lr=1e-3, mesh_2d=(b, h),
                # 3b/3c: the memory comparison, and batches split over all n devices
                H_mem=divisible_size(1680, n), B_all=divisible_size(8, n),
                # 3c: the strategy table's and GPU memory tables' large case (8 GPUs)
                H_big=50_400, T_big=1000, B_big=32)


def _fsdp(n):     # a small MLP whose weights are stored split over 'batch'
    return dict(B=divisible_size(840, n), D=divisible_size(1680, n), layers=3)


def _ch4(n):      # COBA-HH: scale s has 3360 s E + 840 s I neurons, split n ways
    from math import gcd

    scale = n // gcd(840, n)    # the least scale whose 840 s divides by n: 1 for n <= 8
    return dict(scale=scale, exc=3360 * scale, inh=840 * scale)


def _ch5a(n):     # the multi-process RNN: chapter 3's sizes, over processes x devices
    return dict(num_in=8, hidden=divisible_size(840, n), num_out=8, batch=8, time=20,
                steps=3, lr=1e-3, seed=0)


def _ch5b(n):     # checkpoints: saved on n devices, restored onto n // 2 and onto 1
    from math import lcm

    m = lcm(n, max(1, n // 2))   # every mesh of the page: 840 s for n <= 8 (m | 840)
    return dict(num_in=8, hidden=divisible_size(840, m), num_out=8, batch=8, time=20,
                lr=1e-3, scale=_ch4(m)["scale"])


def _ch5c(n):     # troubleshooting: N neurons split n ways; COBA-HH in 4200 s multiples
    unit = _ch4(n)["scale"]
    return dict(N=divisible_size(840, n), coba_step=4200 * unit,
                coba_small=4200 * divisible_size(2_000, unit),
                coba_large=4200 * divisible_size(20_000, unit))


def _ch4a(n):     # page 4a: the published forms at a small size, split n ways
    # 1600 E + 400 I (half the benchmark's), form_steps of 0.1 ms; 12 chunks of 100 ms
    # are the regime protocol's 200 + 1000 ms
    return dict(form_exc=divisible_size(1600, n), form_inh=divisible_size(400, n),
                form_steps=600, chunk_steps=1000, chunks=12)


def _ch2b(n):     # page 2b: the LeNet on 8x8 digits, two batches of B per epoch
    # rounded down: two batches and a test set must fit in the 1,797 digits
    return dict(B=n * max(1, 840 // n), epochs=8, lr=2e-2)


CHAPTERS = {"ch1": _ch1, "ch2": _ch2, "ch3": _ch3, "fsdp": _fsdp, "ch4": _ch4,
            "ch5a": _ch5a, "ch5b": _ch5b, "ch5c": _ch5c,
            "ch4a": _ch4a, "ch2b": _ch2b}


def config(name: str, n: int | None = None) -> Config:
    """The configuration ``name`` for ``n`` devices (default: the lesson devices)."""
    if name not in CHAPTERS:
        raise KeyError(f"no configuration {name!r}; known: {', '.join(CHAPTERS)}")
    if n is None:
        n = _lesson_count()
    if n < 1:
        raise ValueError(f"a device count is at least 1, got {n}")
    return Config(name, n, CHAPTERS[name](n))


# Chapter 4b (speed and memory) adds its sizes to "ch4", none depending on n.
def _ch4_speed(n, _ch4_base=_ch4):
    return dict(_ch4_base(n),
                timed_scale=1,           # the timing table: 4,200 neurons, one device
                timed_steps=200,         # steps per timed chunk (20 ms)
                timed_warmup=300,        # steps before the timed window (30 ms)
                timed_repeats=5,         # interleaved rounds; the median is printed
                gpu_neurons=840_000,     # the GPU-target compiles (8 x H200)
                big_per_device=126_000,  # the million-neuron run: 1,008,000 on 8
                big_steps=100)           # its steps (10 ms)


CHAPTERS["ch4"] = _ch4_speed


# Page 2c (is one GPU enough?): small sizes to compile and run, and the discussion's
# scale (*_big: "input output tensor maybe > 1000^3") for predictions only.  Only the
# with_sharding_constraint section splits anything: a state of H_split units, n ways.
def _ch2c(n):
    return dict(I=4, H=128, O=4, B=16, T=50, micro=(2, 4, 8),
                H_split=divisible_size(128, n),
                lr=1e-4, I_big=1000, H_big=10_000, O_big=1000, B_big=1000,
                T_big=1000)


CHAPTERS["ch2c"] = _ch2c


# Chapter 7 (JAX's newer tools): Y = X @ W in explicit sharding mode (M, K, N split n
# ways) and chapter 3's RNN with the hidden axis split n ways.
def _ch7(n):
    return dict(M=divisible_size(64, n), K=divisible_size(32, n),
                N=divisible_size(48, n), I=8, H=divisible_size(840, n), O=8, T=10,
                B=divisible_size(8, n),   # split n ways in the data-parallel case
                trace_steps=3)        # steps in the profiler trace


CHAPTERS["ch7"] = _ch7
