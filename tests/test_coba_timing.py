"""Chapter 4's timing rules (``coba.timing``) and its time model's byte count
(``coba.timemodel.program_bytes``), each with the mistake it refuses planted.

* ``interleave`` rotates the order each round and reads each round outside its time;
* ``time_steps`` refuses a timed window in which any one chunk was silent, not only a
  window that was silent throughout (a median may be a silent chunk's time);
* ``program_bytes`` refuses a program with a custom call: XLA's cost analysis counts
  no bytes inside one, so the push delivery's CPU kernels would drop its synaptic work
  from the time model (page 4b fits its bytes on the XLA path, ``kernel="xla"``).
"""

import re

import pytest

from shardbook import book, coba, hlo

timing = coba.timing
SCALE = 0.1  # 420 neurons
# the randomised start is active from its first steps; 3 chunks of 2 ms
RUN = dict(steps=20, warmup=50, repeats=3, scale=SCALE, start="random")


def test_interleave_rotates_and_reads_each_round_outside_its_time():
    calls, seen = [], []
    variants = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    out = timing.interleave(variants, repeats=3, warmup=1, after=seen.append)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")
    assert seen == list("abc") + list("bca") + list("cab")  # timed calls only
    assert {k: len(v) for k, v in out.items()} == {"a": 3, "b": 3, "c": 3}


def test_an_active_window_is_timed_with_its_events():
    t = timing.time_steps({"push": dict(conn="push")}, **RUN)["push"]
    assert t.events_per_step > 0 and len(t.samples) == RUN["repeats"]


@pytest.mark.parametrize("silent_from", [1, 2])
def test_a_window_with_one_silent_chunk_is_refused(monkeypatch, silent_from):
    # planted: from timed chunk `silent_from` on, the spike counters stand still, as
    # those of a network that fell silent would (1: silent throughout; 2: active in
    # its first chunk only, which the old check, on the whole window, let through)
    class FallsSilent(coba.Simulation):
        def run(self, steps):
            before = {p: c.value for p, c in self.counts.items()}
            out = super().run(steps)
            self.runs = getattr(self, "runs", 0) + 1  # the first run is the warm-up
            if self.runs > silent_from:
                for p, c in self.counts.items():
                    c.value = before[p]
            return out

    monkeypatch.setattr(timing, "Simulation", FallsSilent)
    with pytest.raises(timing.SilentWindow, match=f"chunk {silent_from} of 3"):
        timing.time_steps({"push": dict(conn="push")}, **RUN)


def test_any_custom_call_is_refused_not_only_the_books():
    # a stand-in compiled program: XLA counts a library's custom call as nothing too
    class Compiled:
        def __init__(self, target):
            self.text = ("ENTRY %main (p: f32[4]) -> f32[4] {\n  ROOT %c = f32[4] "
                         f'custom-call(%p), custom_call_target="{target}"\n}}\n')

        def as_text(self):
            return self.text

        def cost_analysis(self):
            return {"bytes accessed": -1.0}

    for target in ("shardbook_coba_push", "brainevent_numba_ffi_csrmv", "__cublas$gemm",
                   ):
        with pytest.raises(ValueError, match=re.escape(target)):
            coba.timemodel.program_bytes(Compiled(target))
        # the same program read back from the GPU-target cache: refused alike
        prog = hlo.Program(Compiled(target).text, "cpu",
                                meta={"bytes_accessed": 1.0})
        with pytest.raises(ValueError, match=re.escape(target)):
            coba.timemodel.program_bytes(prog)
    plain = ("HloModule m\n\nENTRY %main (p: f32[4]) -> f32[4] {\n"
             "  %p = f32[4] parameter(0)\n  ROOT %n = f32[4] negate(%p)\n}\n")
    assert coba.timemodel.program_bytes(  # recounted from the text: 16 B in, 16 out
        hlo.Program(plain, "cpu", meta={"bytes_accessed": 1.0})) == 32.0
    with pytest.raises(ValueError, match="no cost analysis"):  # a GPU target's Program
        coba.timemodel.program_bytes(hlo.Program(plain, "gpu"))


def test_the_cost_analysis_of_a_custom_call_is_refused():
    def step(**kw):
        net = coba.build(book.devices()[:1], scale=SCALE, conn="push", **kw)
        return coba.Simulation(net, record=()).compile(4)

    xla = coba.timemodel.program_bytes(step(kernel="xla"))
    assert xla > 0
    if not coba.kernels.available():
        pytest.skip(f"no CPU kernels here: {coba.kernels.why_not()}")
    with pytest.raises(ValueError, match="custom call"):
        coba.timemodel.program_bytes(step(kernel="auto"))


def test_the_stored_4m_run_holds_what_page_4b_says():
    import copy
    import json
    from pathlib import Path

    import coba_4m  # lab/coba_4m.py: conftest.py puts ci/ on the path

    path = Path(__file__).resolve().parents[1] / "book" / "data" / "coba_4m.json"
    stored = json.loads(path.read_text())
    coba_4m.check(stored)
    assert stored["neurons"] >= 4_000_000 and stored["events_per_step"] > 0
    def one_byte_more(d):
        d["ledger"]["shards"]["state"] += 1

    # planted: the bool vectors' exchange, a dropped spike, a ledger row off by a byte
    for plant, match in (
        (lambda d: d.update(exchange_bytes_per_step=d["neurons"]), "exchange"),
        (lambda d: d["burst"]["E"].__setitem__(0, 1), "dropped"),
        (one_byte_more, "state"),
    ):
        bad = copy.deepcopy(stored)
        plant(bad)
        with pytest.raises(ValueError, match=match):
            coba_4m.check(bad)
