"""What the lab scripts of chapter 4's regimes share beyond ``shardbook.coba.regimes``:
the graph x start design and one measured run.

``shardbook.coba.regimes`` keeps what the pages read (the forms, the protocol, the
bounds and the checks); this module makes the runs that ``lab/coba_regimes.py`` stores.
Standard library and NumPy only at import: it imports ``shardbook.coba`` (BrainPy) in
:func:`measure`, after the script has set up its devices.
"""
from __future__ import annotations

import numpy as np

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
