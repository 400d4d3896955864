"""recipes/run_coba.py: its compiled step holds only the exchange collectives.

Chapter 4 warns that a population rate summed inside the step adds an all-reduce per
step; across nodes that is a second, latency-bound collective.  The cluster recipe
records a counter per neuron instead and reduces once, after the run.
"""

import importlib.util
from pathlib import Path

from shardbook import book

RUN_COBA = Path(__file__).resolve().parents[1] / "recipes" / "run_coba.py"


def _recipe():
    spec = importlib.util.spec_from_file_location("run_coba_recipe", RUN_COBA)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # main() runs only under __main__
    return mod


def test_the_recipes_step_has_only_the_spike_exchange():
    devices = book.devices()
    sim = _recipe().make_simulation(devices, scale=0.2)
    assert sim.record == ("count",)
    per_step = [c for c in book.Program(sim.compile(5)).collectives if c.per_step]
    if len(devices) == 1:
        assert not per_step
        return
    n_exc, n_inh = sim.net.n_exc, sim.net.n_inh
    assert sorted((c.op, c.nbytes) for c in per_step) == [
        ("all-gather", n_inh),
        ("all-gather", n_exc),
    ]
    # the planted mistake: a rate summed inside the step is an all-reduce per step
    rate = book.coba.Simulation(sim.net, record=("count", "rate")).compile(5)
    assert book.Program(rate).counts(per_step=True)["all-reduce"] >= 1
    sim.run(20)
    totals = sim.totals()  # the one reduction, after the run
    assert set(totals) == {"E", "I"} and all(t >= 0 for t in totals.values())
