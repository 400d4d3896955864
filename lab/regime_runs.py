"""What the lab scripts of chapter 4's regimes share beyond ``shardbook.coba.regimes``:
the graph x start design, one measured run, and the data files' structure.

``shardbook.coba.regimes`` keeps what the pages read (the forms, the protocol, the
bounds and the checks); this module makes the runs that ``lab/coba_regimes.py`` stores.
Standard library and NumPy only at import: :func:`measure` and :func:`validate` import
``shardbook.coba`` (BrainPy), after the script has set up its devices.
"""
from __future__ import annotations

import numpy as np

FORMS_SCHEMA = "shardbook.coba-forms/1"
DT_SCHEMA = "shardbook.coba-dt/1"
REFERENCE_SCHEMA = "shardbook.coba-reference/1"
TIMING_SCHEMA = "shardbook.coba-brian2-timing/1"

# The attribution design: every graph (``shardbook.coba.regimes.GRAPHS_2X2``) with every
# start, at the benchmark's 4000 neurons.
STARTS_2X2 = ("random", "kick", "rest")


def cell(graph: str, start: str, sizes=(3200, 800)) -> dict:
    """``build`` arguments of one cell of the graph x start design."""
    return dict(graph=graph, start=start, sizes=tuple(sizes))


def measure(
    seed: int,
    devices=None,
    dt: float | None = None,
    conn: str = "event",
    protocol=None,
    **network,
) -> dict:
    """Build ``network`` (``build`` arguments) with ``seed`` on ``devices`` (default:
    the first device), run the transient and the window (``protocol``, default
    ``regimes.PROTOCOL``; ``dt``, default ``coba.DT``), and return
    ``regimes.window_stats`` with the run's description."""
    import jax

    from shardbook import coba
    from shardbook.coba import regimes

    dt = coba.DT if dt is None else dt
    protocol = regimes.PROTOCOL if protocol is None else protocol
    devs = jax.devices()[:1] if devices is None else devices
    net = coba.build(devs, seed=seed, dt=dt, conn=conn, **network)
    sim = coba.Simulation(net, record=("spike",))
    steps = int(round((protocol["transient_ms"] + protocol["window_ms"]) / dt))
    out = sim.run(steps)
    raster = np.concatenate(
        [np.asarray(out[f"{p}.spike"]) for p in net.populations], axis=1
    )
    finite = all(
        bool(np.isfinite(np.asarray(p.V.value)).all()) for p in net.populations.values()
    )
    return dict(
        graph=net.graph,
        start=net.start,
        sizes=[net.n_exc, net.n_inh],
        neurons=raster.shape[1],
        seed=seed,
        dt=dt,
        conn=conn,
        finite=finite,
        **regimes.window_stats(raster, dt, protocol),
    )


_NEED = {
    FORMS_SCHEMA: ("protocol", "forms", "seeds", "runs"),
    DT_SCHEMA: ("protocol", "runs"),
    REFERENCE_SCHEMA: ("protocol", "simulator", "runs"),
    TIMING_SCHEMA: ("simulator", "sizes", "rows"),
}
_RUN_KEYS = {
    FORMS_SCHEMA: (
        "form",
        "graph",
        "start",
        "seed",
        "dt",
        "stats",
        "isi_hist",
        "finite",
    ),
    DT_SCHEMA: ("form", "seed", "dt", "stats", "finite"),
    REFERENCE_SCHEMA: ("form", "seed", "connectivity", "stats", "isi_hist"),
    TIMING_SCHEMA: ("neurons", "who", "seconds", "sim_ms", "spikes"),
}


def validate(data: dict) -> dict:
    """Check a regime data file's structure and provenance; raises ``ValueError``
    naming what is missing."""
    from shardbook.coba.regimes import STATS
    schema = data.get("schema")
    if schema not in _NEED:
        raise ValueError(f"unknown schema {schema!r}; expected one of {sorted(_NEED)}")
    missing = [k for k in ("provenance", *_NEED[schema]) if k not in data]
    prov = data.get("provenance", {})
    missing += [
        f"provenance.{k}"
        for k in ("device_kind", "platform", "versions", "date", "command")
        if k not in prov
    ]
    rows = data.get("runs", data.get("rows", []))
    if not rows:
        missing.append("runs (none)")
    for i, r in enumerate(rows):
        missing += [f"runs[{i}].{k}" for k in _RUN_KEYS[schema] if k not in r]
        if "stats" in r:
            missing += [f"runs[{i}].stats.{s}" for s in STATS if s not in r["stats"]]
    if missing:
        raise ValueError(f"{schema} file lacks: " + ", ".join(missing[:20]))
    return data
