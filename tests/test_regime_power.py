"""The regime checks have power: planted parameter bugs fail them, the network passes.

Page 4a checks a run's regime (rate, CV of the ISIs, Fano factor in 5 ms bins, share of
ISIs under 10 ms, after a 200 ms transient) against tolerance bounds made from twelve
seeds of the book's variant (``coba.regimes.tolerance_bounds``, ``coba.regimes.check``).
Here the same check runs on the book's own network (4,200 neurons, 1.2 s of model time,
one device, the push delivery's exact CPU kernels) three times:

* as it is: every statistic inside its bound;
* with the excitatory weight ``we`` halved (a weight scaled by mistake, as a script that
  divides weights by a network's scale would): caught, the rate first;
* with the excitatory time constant ``taue`` doubled (5 ms -> 10 ms): caught.

A change of ``g_Na`` by a factor of two either way is *not* caught (the regime barely
moves); the validation appendix lists the smallest change each bound sees.
"""

import json
from pathlib import Path

import jax
import pytest
from regime_runs import measure, validate  # lab/regime_runs.py

from shardbook.coba import regimes as R, taue, we, wi

DATA = Path(__file__).resolve().parents[1] / "book" / "data"


@pytest.fixture(scope="module")
def bounds():
    path = DATA / "coba_forms.json"   # committed: page 4a reads it
    assert path.exists(), "book/data/coba_forms.json is missing (lab/coba_regimes.py)"
    data = validate(json.loads(path.read_text()))
    made = [
        r
        for r in data["runs"]
        if r["form"] == "book" and r["seed"] in data["seeds"]["bounds"]
    ]
    assert len(made) == 12
    return R.tolerance_bounds(made)  # page 4a's bounds for the book's variant


def _regime(**network_kw):
    # Seed 0 (the chapter's run; not among the seeds that made the bounds).  A planted
    # bug may make most neurons fire in one step: the buffer holds them all
    # (spike_capacity=1), and the CPU kernels deliver exactly whatever it holds.
    run = measure(
        0,
        jax.devices()[:1],
        conn="push",
        spike_capacity=1.0,
        **R.FORMS["book"],
        **network_kw,
    )
    assert run["finite"]
    return run["stats"]


def test_the_network_as_it_is_passes(bounds):
    print(R.check(_regime(), bounds, "as it is"))


def test_halving_the_excitatory_weight_is_caught(bounds):
    stats = _regime(weights=(we / 2, wi))
    with pytest.raises(AssertionError, match="rate = ") as caught:
        R.check(stats, bounds, "planted: we / 2")
    assert stats["rate"] < bounds["rate"][0] / 2  # far outside, not at the edge
    print(caught.value)


def test_doubling_the_excitatory_time_constant_is_caught(bounds, monkeypatch):
    # the build reads the constant from the module that defines it
    monkeypatch.setattr("shardbook.coba.network.taue", 2 * taue)
    stats = _regime()
    with pytest.raises(AssertionError, match="rate = ") as caught:
        R.check(stats, bounds, "planted: taue x 2")
    assert stats["rate"] > 2 * bounds["rate"][1]  # far outside, not at the edge
    print(caught.value)
