"""The scaling data file that ``lab/coba_sweep.py`` writes, and one size's
measurement."""
from __future__ import annotations

import time

import jax
import numpy as np

from ..provenance import provenance  # noqa: F401  (re-exported: lab/coba_sweep.py uses it)
from .ledger import (
    SYNAPSES_PER_NEURON,
    _leaf,
    compiled_stats,
    fit_bytes_per_device,
    measured_bytes,
)
from .network import build
from .parameters import DT, sizes
from .run import Simulation

SCHEMA = "shardbook.coba-scaling/1"


def device_memory() -> dict:
    """The largest ``peak_bytes_in_use`` and the smallest ``bytes_limit`` over this
    process's devices, from ``device.memory_stats()``; ``{}`` where the platform reports
    none (CPU)."""
    stats = []
    for d in jax.local_devices():
        try:
            s = d.memory_stats()
        except Exception:
            s = None
        if s:
            stats.append(s)
    out = {}
    peaks = [s["peak_bytes_in_use"] for s in stats if "peak_bytes_in_use" in s]
    limits = [s["bytes_limit"] for s in stats if "bytes_limit" in s]
    if peaks:
        out["peak_bytes_in_use"] = int(max(peaks))
    if limits:
        out["bytes_limit"] = int(min(limits))
    return out


def measure_size(scale: float, sim_ms: float = 1000.0, chunk_ms: float = 10.0,
                 time_budget: float = 60.0) -> dict:
    """Build, compile and run one size on all devices; what ``lab/coba_sweep.py``
    records.

    Runs chunks of ``chunk_ms`` until ``sim_ms`` is simulated or ``time_budget`` seconds
    of steady-state running are spent (at least one chunk always runs).
    """
    devs = jax.devices()
    n_exc, n_inh = sizes(scale)
    steps = int(round(chunk_ms / DT))
    t0 = time.perf_counter()
    net = build(devs, scale=scale, conn="index")  # the sweep measures the index matrix
    jax.block_until_ready([_leaf(v) for v in net.vars().values()])
    build_s = time.perf_counter() - t0
    sim = Simulation(net, record=("count",))
    sim.compile(steps)
    chunks, run_s = 0, 0.0
    while True:
        _, dt = sim.timed_run(steps)
        chunks, run_s = chunks + 1, run_s + dt
        if chunks * chunk_ms >= sim_ms or run_s + dt > time_budget:
            break
    spikes = sum(
        int(np.asarray(c.value, dtype=np.int64).sum()) for c in sim.counts.values()
    )
    simulated_s = chunks * chunk_ms * 1e-3
    mem = device_memory()
    stats = compiled_stats(sim.compiled[steps])
    return dict(
        scale=scale,
        neurons=n_exc + n_inh,
        n_exc=n_exc,
        n_inh=n_inh,
        devices=len(devs),
        conn="index",
        synapses=SYNAPSES_PER_NEURON * (n_exc + n_inh),
        conn_bytes_per_device=measured_bytes(net)["connectivity"],
        predicted_peak_bytes_per_device=int(
            fit_bytes_per_device(n_exc + n_inh, len(devs))
        ),
        compiled_peak_bytes_per_device=stats["peak"],
        peak_bytes_in_use=mem.get("peak_bytes_in_use"),
        bytes_limit=mem.get("bytes_limit"),
        build_s=build_s,
        compile_s=sim.compile_s[steps],
        steady_s=run_s,
        simulated_s=simulated_s,
        steady_s_per_sim_s=run_s / simulated_s,
        rate_hz=spikes / (n_exc + n_inh) / simulated_s,
    )


def validate_scaling(data: dict) -> dict:
    """Check a scaling data file's structure; raises ``ValueError`` naming what is
    missing."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} file (schema={data.get('schema')!r})")
    prov = data.get("provenance", {})
    need = [
        "device_kind",
        "device_count",
        "platform",
        "simulated",
        "versions",
        "date",
        "command",
    ]
    missing = [k for k in need if k not in prov]
    for pkg in ("jax", "jaxlib", "brainpy", "brainstate", "brainevent"):
        if pkg not in prov.get("versions", {}):
            missing.append(f"versions.{pkg}")
    run_keys = [
        "neurons",
        "devices",
        "conn_bytes_per_device",
        "peak_bytes_in_use",
        "compile_s",
        "steady_s_per_sim_s",
        "rate_hz",
    ]
    for i, run in enumerate(data.get("runs", [])):
        missing += [f"runs[{i}].{k}" for k in run_keys if k not in run]
    if missing:
        raise ValueError("scaling data file lacks: " + ", ".join(missing))
    return data



REGIME_SCHEMA = "shardbook.coba-regimes/1"
# name: what build() needs; the benchmark as published, and the book's variant
VARIANTS = {
    "benchmark": dict(graph="bernoulli", start="random", sizes=(3200, 800)),
    "fixed in-degree": dict(graph="fixed", start="rest", sizes=(3360, 840)),
}


def measure_regime(variant: str, seed: int = 0, sim_ms: float = 2100.,
                   transient_ms: float = 100., window_ms: float = 500.,
                   devices=None) -> dict:
    """Run one variant on ``devices`` (default: the first device) and return its regime
    statistics after the transient: over the whole run, and per window of
    ``window_ms``."""
    from .run import regime

    devs = jax.devices()[:1] if devices is None else devices
    net = build(devs, seed=seed, **VARIANTS[variant])
    sim = Simulation(net, record=("spike",))
    steps, cut = int(round(sim_ms / DT)), int(round(transient_ms / DT))
    out = sim.run(steps)
    spikes = np.concatenate([np.asarray(out[f"{p}.spike"]) for p in ("E", "I")], axis=1)
    finite = all(
        bool(np.isfinite(np.asarray(p.V.value)).all()) for p in net.populations.values()
    )
    after = spikes[cut:]
    per = int(round(window_ms / DT))
    windows = [
        regime(after[i : i + per]) for i in range(0, after.shape[0] - per + 1, per)
    ]
    return dict(variant=variant, seed=seed, neurons=spikes.shape[1], sim_ms=sim_ms,
                transient_ms=transient_ms, window_ms=window_ms, finite=finite,
                whole=regime(after), windows=windows)
