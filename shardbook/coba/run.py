"""Running the network: a compiled time loop run in chunks, and activity statistics."""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import brainpy.math as bm

from .network import COBAHH
from .parameters import DT
from .randomness import _zeros_of

__all__ = [
    "Simulation", "rate_hz", "cv_isi", "isis_ms", "ISI_EDGES_MS", "isi_histogram",
    "population_rate", "fano_factor", "regime"
]


class Simulation:
    """Compile the network's time loop once, then run it in chunks.

    ``record``: ``"spike"`` (a ``[T, n]`` raster per population, split like the
    state), ``"V"`` (the same for potentials), ``"count"`` (spikes per neuron, summed on
    the owning device: no raster) and ``"rate"`` (population spike counts per step: a
    reduction across devices).
    """

    def __init__(self, net: COBAHH, record=("spike",)):
        self.net, self.record, self.t = net, tuple(record), 0
        self.counts = {}
        if "count" in self.record:  # a counter per neuron, split like the neurons
            for name, pop in net.populations.items():
                zeros = jax.jit(
                    _zeros_of,
                    static_argnums=(1, 2),
                    out_shardings=pop.spike.value.sharding,
                )
                self.counts[name] = bm.Variable(
                    zeros(jax.random.PRNGKey(0), pop.num, jnp.dtype(jnp.int32))
                )
        self.loop = bm.jit(self._loop)  # loop(indices): one step per index
        self.compiled = {}
        self.compile_s = {}

    def step_body(self, i):
        """One time step (the loop's body): override it to add to every step."""
        spikes = self.net.step_run(i)
        out = {}
        for name, pop in self.net.populations.items():
            if "spike" in self.record:
                out[f"{name}.spike"] = spikes[name]
            if "V" in self.record:
                out[f"{name}.V"] = pop.V.value
            if "count" in self.record:
                self.counts[name].value += spikes[name]
            if "rate" in self.record:
                out[f"{name}.rate"] = jnp.sum(spikes[name], dtype=jnp.int32)
        return out

    def _loop(self, indices):
        bm.set_dt(getattr(self.net, "dt", DT))  # BrainPy reads its global dt now
        return bm.for_loop(self.step_body, indices)

    def totals(self) -> dict:
        """Spikes so far per population from the ``"count"`` record (else
        ``ValueError``), reduced once, replicated: readable in every process."""
        if not self.counts:
            raise ValueError("totals() needs record=('count', ...)")
        out = {}
        for name, c in self.counts.items():
            replicated = getattr(self.net, "replicated", None)
            total = jax.jit(lambda x: jnp.sum(x, dtype=jnp.int32),
                            out_shardings=replicated)(c.value)
            out[name] = int(jax.device_get(total))
        return out

    def compile(self, steps: int):
        """The compiled program of a ``steps``-long chunk (compiled once per length)."""
        if steps not in self.compiled:
            t0 = time.perf_counter()
            self.compiled[steps] = self.loop.compile(np.arange(steps))
            self.compile_s[steps] = time.perf_counter() - t0
        return self.compiled[steps]

    def run(self, steps: int) -> dict:
        """Advance ``steps`` steps; returns the records (still on the devices)."""
        self.compile(steps)
        out = self.loop(np.arange(self.t, self.t + steps))
        # with nothing recorded, only the new state says the program is done
        jax.block_until_ready(
            (out, [pop.V.value for pop in self.net.populations.values()])
        )
        self.t += steps
        after = getattr(self.net, "after_chunk", None)
        if after is not None:
            after()
        return out

    def timed_run(self, steps: int) -> tuple[dict, float]:
        """``run`` and its wall time in seconds (compilation excluded)."""
        self.compile(steps)
        t0 = time.perf_counter()
        out = self.run(steps)
        return out, time.perf_counter() - t0



def rate_hz(spikes, dt: float = DT) -> float:
    """Mean firing rate in Hz of a ``[T, n]`` boolean raster sampled every ``dt`` ms."""
    s = np.asarray(spikes)
    return float(s.sum() / s.shape[1] / (s.shape[0] * dt * 1e-3))


def cv_isi(spikes, min_spikes: int = 3) -> float:
    """Mean ISI coefficient of variation over neurons with ``min_spikes`` or more."""
    return float(np.mean(cvs)) if (cvs := _cvs(spikes, min_spikes)) else float("nan")


def _cvs(spikes, min_spikes=3):
    cvs = []
    for col in np.asarray(spikes).T:
        t = np.flatnonzero(col)
        if t.size >= min_spikes:
            isi = np.diff(t).astype(np.float64)
            cvs.append(isi.std() / isi.mean())
    return cvs


def isis_ms(spikes, dt: float = DT) -> np.ndarray:
    """Every inter-spike interval of every neuron, in ms."""
    neuron, step = np.nonzero(np.asarray(spikes).T)  # sorted by neuron, then by time
    same = neuron[1:] == neuron[:-1]
    return np.diff(step)[same] * float(dt)


ISI_EDGES_MS = np.logspace(-1, 3, 41)  # 0.1 ms to 1 s, 10 bins per decade


def isi_histogram(spikes, dt: float = DT, edges=ISI_EDGES_MS) -> np.ndarray:
    """Counts of inter-spike intervals in the bins ``edges`` (ms; log-spaced)."""
    return np.histogram(isis_ms(spikes, dt), bins=edges)[0]


def population_rate(spikes, bin_ms: float = 1.0, dt: float = DT) -> np.ndarray:
    """Population rate in Hz, in bins of ``bin_ms``."""
    s = np.asarray(spikes)
    per_bin = max(1, int(round(bin_ms / dt)))
    t = s.shape[0] // per_bin * per_bin
    return s[:t].reshape(-1, per_bin, s.shape[1]).mean(axis=(1, 2)) / (dt * 1e-3)


def fano_factor(spikes, bin_ms: float = 5.0, dt: float = DT) -> float:
    """Variance over mean of the population's spike count in bins of ``bin_ms``: 1 for
    independent Poisson neurons, far more with synchronous volleys."""
    s = np.asarray(spikes)
    per_bin = max(1, int(round(bin_ms / dt)))
    t = s.shape[0] // per_bin * per_bin
    counts = s[:t].reshape(-1, per_bin, s.shape[1]).sum(axis=(1, 2)).astype(np.float64)
    return float(counts.var() / counts.mean()) if counts.mean() > 0 else float("nan")


def regime(spikes, bin_ms: float = 5.0, dt: float = DT) -> dict:
    """Rate (Hz), mean CV of ISIs, Fano factor of the population count, and the fraction
    of ISIs under 10 ms, of a ``[T, n]`` raster (cut the transient off first)."""
    isi = isis_ms(spikes, dt)
    return dict(rate=rate_hz(spikes, dt), cv=cv_isi(spikes),
                fano=fano_factor(spikes, bin_ms, dt),
                short_isi=float((isi < 10.).mean()) if isi.size else float("nan"))
