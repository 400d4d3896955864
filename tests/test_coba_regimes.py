"""Bounds with stated coverage, a planted tenfold change in synchrony, the stored data.

* the tolerance factor matches the published table, and the intervals it makes cover
  what they say they cover (a Monte Carlo check on log-normal samples);
* the stored bounds of every form catch a tenfold change in synchrony, in either
  direction, while a raster of the form's own synchrony passes (the planted change);
* held-out seeds fall inside the bounds made without them; a seed in both is refused;
* the book's runs lie inside Brian 2's seed-to-seed spread, and a planted shift of the
  rate does not;
* every data file under book/data that this code reads matches its schema.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from regime_runs import FORMS_SCHEMA, STARTS_2X2, validate  # lab/regime_runs.py

from shardbook import coba
from shardbook.coba import regimes as R

DATA = Path(__file__).resolve().parents[1] / "book" / "data"


def _load(name):
    path = DATA / name   # committed: pages 4a and 4b read it
    assert path.exists(), f"book/data/{name} is missing (its provenance names a script)"
    return validate(json.loads(path.read_text()))


def _runs(data, form, seeds):
    return [r for r in data["runs"] if r["form"] == form and r["seed"] in seeds]


# The exact two-sided normal tolerance factors, by numerical integration: the confidence
# that mean +- k sd covers p of the population is
# E_z[P(chi2_{n-1} >= (n-1) r(z)^2 / k^2)], r(z) solving
# Phi(z/sqrt(n) + r) - Phi(z/sqrt(n) - r) = p (scipy's quad and brentq).
EXACT = {(12, 0.999, 0.95): 5.2875, (20, 0.95, 0.95): 2.7603, (10, 0.99, 0.95): 4.4369}


def test_tolerance_factor_is_howes_approximation_of_the_exact_one():
    for (n, p, g), exact in EXACT.items():
        assert R.tolerance_factor(n, p, g) == pytest.approx(exact, rel=0.01)
    with pytest.raises(ValueError):
        R.tolerance_factor(2)


def test_tolerance_intervals_cover_what_they_claim():
    from scipy import stats

    rng = np.random.default_rng(0)
    n, trials, hits = 12, 400, 0
    for _ in range(trials):  # log-normal samples: the bounds are on the logs
        runs = [dict(stats=dict(x=float(v))) for v in rng.lognormal(1.0, 0.3, n)]
        lo, hi = R.tolerance_bounds(runs, stats=("x",))["x"]
        covered = stats.norm.cdf((np.log(hi) - 1.0) / 0.3) - stats.norm.cdf(
            (np.log(lo) - 1.0) / 0.3
        )
        hits += covered >= 0.999
    assert 0.92 <= hits / trials <= 0.98  # confidence 0.95


def test_check_names_what_is_outside():
    bounds = dict(rate=(20.0, 40.0), fano=(5.0, 30.0))
    assert "inside" in R.check(dict(rate=30.0, fano=10.0), bounds)
    with pytest.raises(AssertionError, match=r"fano = 50 outside \[5, 30\]"):
        R.check(dict(rate=30.0, fano=50.0), bounds, "planted")


@pytest.mark.parametrize("form", list(R.FORMS))
def test_the_fano_bound_catches_a_tenfold_change_in_synchrony(form):
    data = _load("coba_forms.json")
    runs = _runs(data, form, data["seeds"]["bounds"])
    bounds = R.tolerance_bounds(runs)
    fano = float(np.median([r["stats"]["fano"] for r in runs]))
    rate = float(np.median([r["stats"]["rate"] for r in runs]))
    neurons = runs[0]["neurons"]
    sync = fano - 1  # synchrony: the excess over independent neurons
    for factor, passes in ((1, True), (10, False), (0.1, False)):
        raster = R.synchrony_raster(1 + factor * sync, rate, neurons, seed=7)
        got = coba.regime(raster)
        if passes:
            R.check(got, bounds, f"{form}, its own synchrony", names=("fano",))
        else:
            with pytest.raises(AssertionError, match="fano"):
                R.check(got, bounds, f"{form}, synchrony x {factor}", names=("fano",))


@pytest.mark.parametrize("form", list(R.FORMS))
def test_held_out_seeds_fall_inside(form):
    data = _load("coba_forms.json")
    seeds = data["seeds"]
    assert len(seeds["held_out"]) >= 8 and not set(seeds["held_out"]) & set(
        seeds["bounds"]
    )
    assert 0 not in seeds["bounds"] + seeds["held_out"]  # seed 0: the chapter's own run
    got = R.held_out(
        _runs(data, form, seeds["bounds"]), _runs(data, form, seeds["held_out"])
    )
    assert all(inside == of == len(seeds["held_out"]) for inside, of in got.values()), (
        got
    )
    with pytest.raises(ValueError, match="also made the bounds"):
        R.held_out(
            _runs(data, form, seeds["bounds"]), _runs(data, form, seeds["bounds"][:2])
        )


def test_the_forms_differ_and_the_design_attributes_it():
    data = _load("coba_forms.json")
    att = R.attribution(
        [
            r
            for r in data["runs"]
            if r["sizes"] == [3200, 800] and r["seed"] in data["seeds"]["cells"]
        ]
    )
    assert len(att["cells"]) == len(R.GRAPHS_2X2) * len(STARTS_2X2)
    assert all(v[2] >= 4 for cell in att["cells"].values() for v in cell.values())
    effects = att["effects"]
    assert set(effects) >= {"graph (bernoulli - fixed)", "start (kick - random)"}


def test_the_book_lies_inside_brian2s_spread():
    forms, ref = _load("coba_forms.json"), _load("coba_reference.json")
    for form in ("brette", "nest"):
        mine = _runs(forms, form, forms["seeds"]["bounds"] + forms["seeds"]["held_out"])
        brian = [
            r for r in ref["runs"] if r["form"] == form and r["connectivity"] == "own"
        ]
        print(R.within_reference(mine, brian, what=f"the book, {form}"))
        shifted = [
            dict(r, stats=dict(r["stats"], rate=1.5 * r["stats"]["rate"]))
            for r in mine[:1]
        ]
        with pytest.raises(AssertionError, match="rate"):
            R.within_reference(shifted, brian, what="planted: 1.5 x the rate")
        agree = R.means_agree(mine, brian)  # the means, within 3 standard errors
        assert all(abs(d) < 0.1 for d, _ in agree.values()), agree
        # planted: every run 25 % faster
        faster = [dict(r, stats=dict(r["stats"], rate=1.25 * r["stats"]["rate"]))
                  for r in mine]
        with pytest.raises(AssertionError, match="rate"):
            R.means_agree(faster, brian)


def test_stored_files_match_their_schemas():
    """The pages read these without validating them (coba.regimes.load): each
    committed file passes lab/regime_runs.py's validate, and a planted bad one fails
    it."""
    for name in (
        "coba_forms.json",
        "coba_dt.json",
        "coba_reference.json",
        "coba_brian2_timing.json",
    ):
        data = validate(json.loads((DATA / name).read_text()))
        assert data["provenance"]["versions"]["jax"]
    with pytest.raises(ValueError, match="provenance"):
        validate(dict(schema=FORMS_SCHEMA, protocol={}, forms={}, seeds={}, runs=[{}]))


def test_window_stats_of_a_short_raster_are_refused():
    with pytest.raises(ValueError, match="protocol needs"):
        R.window_stats(np.zeros((100, 3), bool))


def test_the_time_step_series_is_complete_and_read_the_same_way():
    data = _load("coba_dt.json")
    conv = R.dt_convergence(data["runs"])
    assert set(conv) == {"brette", "nest"}
    for form, got in conv.items():
        assert set(got["table"]) == {0.1, 0.05, 0.025} and got["finest"] == 0.025
        assert all(
            cell[2] >= 4 for row in got["table"].values() for cell in row.values()
        )
        assert all(v["diff"] == 0 for v in got["verdict"][0.025].values())
    # a planted series that does not move with dt is "converged" everywhere
    flat = [dict(r, stats=dict(r["stats"], rate=30.0)) for r in data["runs"]]
    verdict = R.dt_convergence(flat)["nest"]["verdict"]
    assert all(v["rate"]["within_2se"] for v in verdict.values())
