"""The benchmark's published forms, their regimes, and bounds with stated coverage.

:data:`FORMS`: ``"brette"`` (Brian 2's ``COBAHH.py``: Bernoulli graph with p = 0.02,
V and g random), ``"nest"`` (NEST's ``hh_coba``: fixed in-degree 64 + 16, all at E_L, a
300 Hz Poisson kick onto 50 E neurons from 1 to 51 ms), both 3200 E + 800 I, and
``"book"`` (NEST's graph, 3360 E + 840 I, V random, g zero); sources in :data:`SOURCES`.

A regime is four statistics of a window after a transient (:data:`PROTOCOL`): rate,
mean ISI CV, Fano factor of the population count in 5 ms bins, share of ISIs under
10 ms.  :func:`tolerance_bounds` are normal tolerance intervals on the log statistic
over seeds: by default at least 99.9 % of runs (new seeds, or the same seed on another
CPU: chaos makes it a new sample) with 95 % confidence.  :func:`held_out` checks them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .parameters import DT

__all__ = [
    "FORMS",
    "SOURCES",
    "GRAPHS_2X2",
    "PROTOCOL",
    "STATS",
    "window_stats",
    "tolerance_factor",
    "tolerance_bounds",
    "check",
    "held_out",
    "attribution",
    "dt_convergence",
    "within_reference",
    "means_agree",
    "load",
    "synchrony_raster",
]

FORMS = {
    "brette": dict(graph="bernoulli", start="random", sizes=(3200, 800)),
    "nest": dict(graph="fixed", start="kick", sizes=(3200, 800)),
    "book": dict(graph="fixed", start="rest", sizes=(3360, 840)),
}
SOURCES = {
    "brette": "Brette et al. 2007, J. Comput. Neurosci. 23:349-398, benchmark 3, as in "
    "Brian 2's examples/COBAHH.py (tags 2.9.0 and 2.10.1)",
    "nest": "NEST 3.10, pynest/examples/brette_et_al_2007/hh_coba.py with "
    "brette_et_al_2007_benchmark.py (hh_cond_exp_traub)",
    "book": "this book: NEST's graph, 3360 E + 840 I neurons, V random, g = 0",
}
# The attribution design: every graph x every start at 4000 neurons (lab/regime_runs.py)
GRAPHS_2X2 = ("bernoulli", "fixed")
PROTOCOL = dict(transient_ms=200.0, window_ms=1000.0, bin_ms=5.0)
STATS = ("rate", "cv", "fano", "short_isi")


def window_stats(raster, dt: float = DT, protocol=PROTOCOL) -> dict:
    """The regime of a ``[T, n]`` raster's window after the transient, its ISI
    histogram (``run.ISI_EDGES_MS``) and the population rate in 10 ms bins."""
    from .run import isi_histogram, population_rate, regime

    r = np.asarray(raster, dtype=bool)
    cut = int(round(protocol["transient_ms"] / dt))
    stop = cut + int(round(protocol["window_ms"] / dt))
    if r.shape[0] < stop:
        raise ValueError(
            f"the raster has {r.shape[0]} steps; the protocol needs {stop}"
        )
    window = r[cut:stop]
    return dict(
        stats=regime(window, protocol["bin_ms"], dt),
        isi_hist=isi_histogram(window, dt).tolist(),
        rate_10ms=np.round(population_rate(r[:stop], 10.0, dt), 3).tolist(),
        spikes=int(window.sum()),
    )


def tolerance_factor(
    n: int, coverage: float = 0.999, confidence: float = 0.95
) -> float:
    """k of the two-sided normal tolerance interval mean +- k sd from ``n`` >= 3
    samples (else ``ValueError``): at least ``coverage`` of the population with
    probability ``confidence`` (Howe 1969; NIST/SEMATECH e-Handbook 7.2.6.3)."""
    from scipy import stats

    if n < 3:
        raise ValueError("a tolerance interval needs at least 3 samples")
    z = stats.norm.ppf((1 + coverage) / 2)
    chi2 = stats.chi2.ppf(1 - confidence, n - 1)
    return float(math.sqrt((n - 1) * (1 + 1 / n) * z * z / chi2))


def tolerance_bounds(
    runs, stats=STATS, coverage: float = 0.999, confidence: float = 0.95
) -> dict:
    """{statistic: (low, high)}: the tolerance interval of the log statistic over
    ``runs`` (each a dict with ``"stats"``, from independent seeds), exponentiated."""
    runs = list(runs)
    k = tolerance_factor(len(runs), coverage, confidence)
    out = {}
    for s in stats:
        v = np.log([r["stats"][s] for r in runs])
        m, sd = float(v.mean()), float(v.std(ddof=1))
        out[s] = (math.exp(m - k * sd), math.exp(m + k * sd))
    return out


def check(stats: dict, bounds: dict, what: str = "", names=None) -> str:
    """A verdict: every statistic of ``stats`` (``names``, default all of ``bounds``)
    inside its bound.  Raises ``AssertionError`` naming each one outside."""
    names = tuple(bounds) if names is None else tuple(names)
    outside = [
        f"{s} = {stats[s]:.4g} outside [{bounds[s][0]:.4g}, {bounds[s][1]:.4g}]"
        for s in names
        if not bounds[s][0] <= stats[s] <= bounds[s][1]
    ]
    head = f"{what}: " if what else ""
    if outside:
        raise AssertionError(head + "; ".join(outside))
    return head + f"{', '.join(names)} inside the bounds"


def held_out(bound_runs, held_runs, **kw) -> dict:
    """How many held-out runs fall inside the bounds made from ``bound_runs``, per
    statistic: {statistic: (inside, of)}.  Shared seeds raise ``ValueError``."""
    seeds = {r["seed"] for r in bound_runs}
    if seeds & {r["seed"] for r in held_runs}:
        raise ValueError(
            f"held-out seeds {sorted(seeds & {r['seed'] for r in held_runs})}"
            " also made the bounds"
        )
    b = tolerance_bounds(bound_runs, **kw)
    return {
        s: (sum(lo <= r["stats"][s] <= hi for r in held_runs), len(held_runs))
        for s, (lo, hi) in b.items()
    }


def _mean_sd(values):
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else float("nan")


def attribution(runs, stats=STATS) -> dict:
    """The graph x start design of runs with ``graph`` and ``start`` fields: ``cells``
    {(graph, start): {stat: (mean, sd, n)}} and ``effects`` {"graph (bernoulli -
    fixed)" or "start (<a> - <b>)": {stat: (difference, se) or None}}."""
    cells = {}
    for r in runs:
        cells.setdefault((r["graph"], r["start"]), []).append(r)
    table = {
        key: {s: (*_mean_sd([r["stats"][s] for r in rs]), len(rs)) for s in stats}
        for key, rs in cells.items()
    }

    def effect(a_keys, b_keys, s):
        a = [table[k][s] for k in a_keys if k in table]
        b = [table[k][s] for k in b_keys if k in table]
        if not a or len(a) != len(b):
            return None
        diff = np.mean([x[0] for x in a]) - np.mean([x[0] for x in b])
        var = sum(x[1] ** 2 / x[2] for x in a) + sum(x[1] ** 2 / x[2] for x in b)
        return float(diff), float(math.sqrt(var) / len(a))

    starts = sorted({k[1] for k in table})
    effects = {
        "graph (bernoulli - fixed)": {
            s: effect(
                [("bernoulli", st) for st in starts],
                [("fixed", st) for st in starts],
                s,
            )
            for s in stats
        }
    }
    for i, a in enumerate(starts):
        for b in starts[i + 1 :]:
            effects[f"start ({a} - {b})"] = {
                s: effect([(g, a) for g in GRAPHS_2X2], [(g, b) for g in GRAPHS_2X2], s)
                for s in stats
            }
    return dict(cells=table, effects=effects)


def dt_convergence(runs, stats=STATS, finest: float | None = None) -> dict:
    """Per form: ``table`` {dt: {stat: (mean, sd, n)}}, ``finest`` and ``verdict``
    {dt: {stat: {diff, se, rel, within_2se}}}: whether each dt's mean lies within 2
    standard errors (of the difference) of the finest dt's."""
    by = {}
    for r in runs:
        by.setdefault(r["form"], {}).setdefault(r["dt"], []).append(r)
    out = {}
    for form, per_dt in by.items():
        table = {
            dt: {s: (*_mean_sd([r["stats"][s] for r in rs]), len(rs)) for s in stats}
            for dt, rs in sorted(per_dt.items())
        }
        ref = min(table) if finest is None else finest
        verdict = {}
        for dt, row in table.items():
            verdict[dt] = {}
            for s in stats:
                (m, sd, n), (m0, sd0, n0) = row[s], table[ref][s]
                se = math.sqrt(sd**2 / n + sd0**2 / n0)
                verdict[dt][s] = dict(
                    diff=m - m0,
                    se=se,
                    rel=(m - m0) / m0,
                    within_2se=abs(m - m0) <= 2 * se,
                )
        out[form] = dict(table=table, finest=ref, verdict=verdict)
    return out


def within_reference(
    book_runs,
    reference_runs,
    stats=STATS,
    coverage: float = 0.999,
    confidence: float = 0.95,
    what: str = "the book",
) -> str:
    """Assert every book run lies inside the tolerance interval of ``reference_runs``
    (independent seeds).  Returns a verdict; ``AssertionError`` names each run and
    statistic outside."""
    bounds = tolerance_bounds(reference_runs, stats, coverage, confidence)
    bad = []
    for r in book_runs:
        try:
            check(r["stats"], bounds, names=stats)
        except AssertionError as err:
            bad.append(f"seed {r.get('seed')}: {err}")
    if bad:
        raise AssertionError(
            f"{what} lies outside the reference's spread: " + " | ".join(bad)
        )
    return (
        f"{what}: {len(list(book_runs))} run(s), {', '.join(stats)} inside the "
        f"reference's {coverage:.1%} tolerance interval ({len(reference_runs)} seeds)"
    )


def means_agree(book_runs, reference_runs, stats=STATS, k: float = 3.0) -> dict:
    """{stat: (relative difference, its standard error)} of the book's means against
    the reference's (Welch, independent seeds).  ``AssertionError`` where one exceeds
    ``k`` standard errors: far sharper on the mean than :func:`within_reference`."""
    out, bad = {}, []
    for s in stats:
        (m, sd, n), (m0, sd0, n0) = (
            (*_mean_sd([r["stats"][s] for r in rs]), len(rs))
            for rs in (book_runs, reference_runs))
        se = math.sqrt(sd**2 / n + sd0**2 / n0)
        out[s] = ((m - m0) / m0, se / m0)
        if abs(m - m0) > k * se:
            bad.append(f"{s}: {m:.4g} against {m0:.4g}, "
                       f"{abs(m - m0) / se:.1f} se apart")
    if bad:
        raise AssertionError(f"the means differ by more than {k:g} se: "
                             + "; ".join(bad))
    return out


def synchrony_raster(
    fano: float,
    rate_hz: float = 35.0,
    neurons: int = 4000,
    ms: float = 1000.0,
    bin_ms: float = 5.0,
    dt: float = DT,
    seed: int = 0,
) -> np.ndarray:
    """A ``[T, neurons]`` raster whose population count in ``bin_ms`` bins has Fano
    factor ``fano`` on average: Poisson neurons at ``rate_hz`` times a gain shared by
    all, drawn per bin from a gamma of mean 1 and variance ``(fano - 1) / mu`` (mu: mean
    count per bin).  The shared gain is planted synchrony; ``fano - 1`` measures it."""
    rng = np.random.default_rng(seed)
    per_bin = int(round(bin_ms / dt))
    bins = int(round(ms / bin_ms))
    mu = neurons * rate_hz * bin_ms * 1e-3
    var = max(fano - 1.0, 1e-9) / mu
    gain = rng.gamma(1.0 / var, var, size=bins)
    counts = rng.poisson(rate_hz * bin_ms * 1e-3 * gain[:, None], size=(bins, neurons))
    b, n = np.nonzero(counts)
    b, n = np.repeat(b, counts[b, n]), np.repeat(n, counts[b, n])
    raster = np.zeros((bins * per_bin, neurons), bool)
    raster[b * per_bin + rng.integers(0, per_bin, b.size), n] = True
    return raster


def load(name: str, root=None) -> dict:
    """A regime data file by name (e.g. ``"coba_forms.json"``), from ``root`` (default
    :func:`shardbook.data_dir`); ``FileNotFoundError`` if absent.  Its structure is
    checked by ``tests/test_coba_regimes.py`` with ``lab/regime_runs.py``."""
    from .. import data_dir

    path = Path(root if root is not None else data_dir()) / name
    if not path.exists():
        raise FileNotFoundError(f"{name} not found in {path.parent}")
    return json.loads(path.read_text())
