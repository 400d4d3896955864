"""recipes/run_coba.py: its compiled step holds only the exchange collectives.

Chapter 4 warns that a population rate summed inside the step adds an all-reduce per
step; across nodes that is a second, latency-bound collective.  The cluster recipe
records a counter per neuron instead and reduces once, after the run.  Its delivery
is chapter 4's default and fastest, the push of spike indices.
"""

import importlib.util
from pathlib import Path

import numpy as np

from shardbook import book, coba, expect
from shardbook.hlo import Program

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
    assert sim.net.conn_kind == "push"  # COBAHH's default, chapter 4's fastest delivery
    prog = Program(sim.compile(5))
    ids = coba.push.gathered_ids(sim.net.n_exc, sim.net.n_inh, len(devices))
    # the exchange of spike indices, E and I, and nothing else in the step; on one
    # device too (the entry's single_device = "as listed": XLA:CPU keeps them)
    print(expect.check("coba.push.step", prog, **ids))
    # the planted mistake: a rate summed inside the step is an all-reduce per step
    rate = coba.Simulation(sim.net, record=("count", "rate")).compile(5)
    assert Program(rate).counts(per_step=True)["all-reduce"] >= 1
    sim.run(20)   # 2 ms from rest: few spikes or none, so one more per neuron is added
    spiked = {k: int(np.asarray(c.value).sum()) for k, c in sim.counts.items()}
    for k, c in sim.counts.items():
        c.value = c.value + 1   # on the devices that hold each block
        spike = sim.net.populations[k].spike.value.sharding
        assert c.value.sharding == spike and len(c.value.addressable_shards) > 1, k
    totals = sim.totals()  # the one reduction, after the run: every block counted
    assert totals == {k: spiked[k] + c.value.size for k, c in sim.counts.items()}
