"""Fair timings of chapter 4: variants side by side, interleaved, with their work.

Rules (the book's, for every speed claim):

* variants run in one process, **interleaved** (round robin, the order rotated each
  round) and **repeated**; the figure is the **median**;
* every time is printed beside its work: **synaptic events per step** (a spike of a
  neuron with out-degree ``d`` is ``d`` events) and **events per microsecond**;
* a window with **no events is refused** (:class:`SilentWindow`), and so is a window
  with one silent chunk (a median may be that chunk's time): a silent network measures
  the delivery's fixed costs, not its work.

:func:`time_steps` times the whole network step of an active network, compilation
timed apart.  (The delivery alone, every representation on the same recorded spike
trains, is measured by ``lab/coba_speed.py``.)

Compilation is excluded from every steady-state figure and reported on its own.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import jax
import numpy as np

from .network import build
from .parameters import DT
from .run import Simulation

__all__ = ["SilentWindow", "Timing", "interleave", "out_degree", "out_degrees",
           "time_steps", "ACTIVE_K800"]

# The in-degree 800 network that stays active (issue 19: weights scaled by 80/K, by
# sqrt(80/K), or a raised rest all fall silent after the opening volley; this strongly
# driven setting fires at about 195 Hz).
ACTIVE_K800 = dict(k=(640, 160), weights=(2.4, 6.7))


class SilentWindow(ValueError):
    """A timed window with no synaptic events: it would time nothing."""


@dataclass
class Timing:
    """One variant's median time per step, and the work of that step."""

    name: str
    seconds_per_step: float
    events_per_step: float
    samples: list = field(default_factory=list)   # seconds per step, every repeat
    extra: dict = field(default_factory=dict)

    @property
    def events_per_us(self) -> float:
        return self.events_per_step / (self.seconds_per_step * 1e6)

    @property
    def s_per_sim_s(self) -> float:
        """Seconds of wall time per simulated second (10,000 steps of 0.1 ms)."""
        return self.seconds_per_step / (DT * 1e-3)

    def line(self, width: int = 26) -> str:
        spread = (max(self.samples) - min(self.samples)) / self.seconds_per_step
        return (f"{self.name:<{width}}{self.events_per_step:>10,.0f} events/step "
                f"{self.events_per_us:>8.1f} events/us  (spread {spread:.0%})  "
                f"{self.seconds_per_step * 1e6:.1f} us wall")

    def asdict(self) -> dict:
        out = asdict(self)
        out["events_per_us"] = self.events_per_us
        out["s_per_sim_s"] = self.s_per_sim_s
        return out


def interleave(variants: dict, repeats: int = 5, warmup: int = 1, after=None) -> dict:
    """Run each ``variants[name]()`` (it blocks until its work is done) ``warmup``
    times, then ``repeats`` rounds, the order rotated each round; returns
    ``{name: [seconds, ...]}``.  ``after(name)``, if given, runs after each timed call,
    outside its time (to read what the round did)."""
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    out = {name: [] for name in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            variants[name]()
            out[name].append(time.perf_counter() - t0)
            if after is not None:
                after(name)
    return out


def out_degree(sources: np.ndarray, n_pre: int) -> np.ndarray:
    """How many synapses each presynaptic neuron makes, from a ``[k, n_post]`` graph."""
    return np.bincount(np.asarray(sources).reshape(-1), minlength=n_pre)[:n_pre]


# ------------------------------------------------------------------ the whole step
def out_degrees(net) -> dict:
    """``{"E": int64[n_exc], "I": int64[n_inh]}``: each neuron's synapses, all
    projections and devices together, read from the network's connectivity."""
    from .ledger import _leaf

    out = {"E": np.zeros(net.n_exc, np.int64), "I": np.zeros(net.n_inh, np.int64)}
    for name, proj in net.projections.items():
        pre, comm = name[0], proj.comm
        n_pre = out[pre].size
        if hasattr(comm, "conn"):
            src = np.asarray(_leaf(comm.conn))
            if comm.kind == "mask":
                out[pre] += src.sum(axis=1)
            else:
                out[pre] += out_degree(src[src < n_pre], n_pre)
        elif hasattr(comm.op, "indptr"):
            indptr = np.asarray(_leaf(comm.op.indptr)).reshape(-1, n_pre + 1)
            out[pre] += np.diff(indptr, axis=1).sum(axis=0)
        else:
            raise ValueError(f"{name}: no stored graph to count ({comm.kind!r})")
    return out


def _counts(sim) -> dict:
    return {p: np.asarray(c.value, np.int64) for p, c in sim.counts.items()}


def time_steps(variants: dict, steps: int = 500, warmup: int = 1000, repeats: int = 3,
               devices=None, **common) -> dict:
    """The whole step, side by side: ``{name: Timing}`` for networks built with
    ``common`` and each ``variants[name]`` (keyword arguments of :func:`build`).

    Each network runs ``warmup`` steps, then ``repeats`` interleaved chunks of ``steps``
    steps; the events per step come from each network's spike counters and out-degrees.
    ``extra`` holds the compile seconds and the mean rate (Hz) of the timed window.
    Raises :class:`SilentWindow` if any timed chunk of any network delivered no event:
    a median may be the time of a silent chunk, so every chunk must carry work.
    """
    devices = list(devices) if devices is not None else jax.devices()[:1]
    sims, degrees, compile_s = {}, {}, {}
    for name, kw in variants.items():
        net = build(devices, **{**common, **kw})
        sim = Simulation(net, record=("count",))
        sim.compile(steps)
        compile_s[name] = sim.compile_s[steps]
        if warmup:
            sim.run(warmup)
        sims[name], degrees[name] = sim, out_degrees(net)
    snaps = {name: [_counts(sim)] for name, sim in sims.items()}  # before each chunk
    samples = interleave({name: (lambda s=sim: s.run(steps)) for name, sim in
                          sims.items()}, repeats=repeats, warmup=0,
                         after=lambda name: snaps[name].append(_counts(sims[name])))
    out = {}
    for name in sims:
        for r, (a, b) in enumerate(zip(snaps[name], snaps[name][1:])):
            if sum(float((b[p] - a[p]) @ degrees[name][p]) for p in b) == 0:
                raise SilentWindow(f"{name}: no synaptic event in timed chunk {r + 1} "
                                   f"of {repeats} ({steps} steps)")
        spikes = {p: snaps[name][-1][p] - snaps[name][0][p] for p in snaps[name][0]}
        total_steps = steps * repeats
        events = sum(float(spikes[p] @ degrees[name][p]) for p in spikes) / total_steps
        n = sum(v.size for v in spikes.values())
        rate = sum(v.sum() for v in spikes.values()) / n / (total_steps * DT * 1e-3)
        out[name] = Timing(name, float(np.median(samples[name])) / steps, events,
                           [x / steps for x in samples[name]],
                           dict(compile_s=compile_s[name], rate_hz=float(rate),
                                neurons=n, devices=len(devices), steps=steps))
    return out
