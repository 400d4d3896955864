"""Write a ``jax.profiler`` trace of a few steps and read it back: where the time went.

:func:`record` writes an ``.xplane.pb`` (JAX docs, "Profiling computation");
:func:`read` reads it with ``jax.profiler.ProfileData``, *against the program*: an event
is an operation of the step when it names an instruction of ``compiled.as_text()``
(through its ``hlo_op`` stat where it has one: XLA:GPU names events after CUDA kernels),
and a collective when that instruction's opcode is one (a ``-start``/``-done`` pair
counts once; in a loop, once per trip).  The book checks CPU traces only; the GPU path
is tested on a hand-written trace (``tests/test_traces.py``)::

    path = traces.record(step, x, w, steps=3, log_dir="_build/trace")
    trace = traces.read(path, Program(step.lower(x, w).compile()))
    trace.count("all-reduce"), trace.share()    # events, collective share of op time
    print(trace.verdict(steps=3))               # the counts, checked; no float

This module imports JAX only inside its functions.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Event", "Trace", "record", "read", "from_profile", "collective_of",
           "instruction_of"]

_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s+=\s+(.+?)\s+([a-z][\w\-]*)\(")
_COLLECTIVE = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all|"
    r"collective-broadcast|ragged-all-to-all)(?:-start|-done)?(?:\.\d+)?$")


def collective_of(opcode: str) -> str | None:
    """The collective an HLO opcode stands for (``"all-reduce-start"`` ->
    ``"all-reduce"``), or ``None``."""
    m = _COLLECTIVE.match(opcode)
    return m.group(1) if m else None


@dataclass(frozen=True)
class Event:
    """One event of a trace that is an instruction of the program."""

    name: str            # the HLO instruction ("ppermute.3", "all-reduce", ...)
    op: str              # its opcode ("collective-permute", "fusion", ...)
    plane: str           # "/host:CPU", "/device:GPU:0", ...
    line: str            # the thread or stream
    start_ns: float
    duration_ns: float

    @property
    def collective(self) -> str | None:
        return collective_of(self.op)


class Trace:
    """The events of a trace that are instructions of ``program``."""

    def __init__(self, events: list[Event], program, path: str | None = None):
        self.events, self.program, self.path = list(events), program, path

    @property
    def collectives(self) -> list[Event]:
        return [e for e in self.events if e.collective]

    def counts(self) -> Counter:
        """Collective events by kind (a ``-start``/``-done`` pair counts once)."""
        return Counter(e.collective for e in self.collectives
                       if not e.op.endswith("-done"))

    def count(self, op: str) -> int:
        return self.counts()[op]

    def op_ns(self) -> float:
        """Total duration of the program's operations, summed over every device."""
        return sum(e.duration_ns for e in self.events)

    def collective_ns(self) -> float:
        return sum(e.duration_ns for e in self.collectives)

    def share(self) -> float:
        """The collectives' share of the operations' time (0 when nothing ran)."""
        total = self.op_ns()
        return self.collective_ns() / total if total else 0.0

    def expected_counts(self, steps: int) -> Counter:
        """The collective events the program predicts: each once per step and device,
        times the trip counts of the loops around it."""
        prog, want = self.program, Counter()
        for c in prog.collectives:
            want[c.op] += prog.trips_of(c) * steps * prog.devices
        return want

    def check(self, steps: int) -> Counter:
        """Assert that the trace holds exactly :meth:`expected_counts`
        (``AssertionError`` otherwise); return the counts."""
        got, want = self.counts(), self.expected_counts(steps)
        if got != want:
            raise AssertionError(
                f"the trace holds collective events {dict(got)}, but {steps} step(s) "
                f"of the program on {self.program.devices} device(s) launch "
                f"{dict(want)}")
        return got

    def verdict(self, steps: int, above: float | None = None,
                below: float | None = None) -> str:
        """A sentence of the checked counts and, with ``above``/``below``, the asserted
        bound on the collectives' share: true on any CPU, with no measured float."""
        got = self.check(steps)
        parts = [f"{k} {got[k]}" for k in sorted(got)] or ["no collective"]
        text = (f"the trace holds {', '.join(parts)} event(s) = {steps} step(s) x "
                f"{self.program.devices} device(s) x the program's collectives")
        share = self.share()
        if above is not None:
            if not share > above:
                raise AssertionError(f"collectives hold {share:.1%} of the op time, "
                                     f"not more than {above:.0%}")
            text += f"; they hold more than {above:.0%} of the op time"
        if below is not None:
            if not share < below:
                raise AssertionError(f"collectives hold {share:.1%} of the op time, "
                                     f"not less than {below:.0%}")
            text += f"; they hold less than {below:.0%} of the op time"
        return text


def _instructions(text: str) -> dict[str, str]:
    """``{instruction name: opcode}`` of an HLO text."""
    return {m.group(1): m.group(3) for line in text.splitlines()
            if (m := _INSTR.match(line))}


def instruction_of(event) -> str:
    """The HLO instruction a ``ProfileData`` event stands for: its ``hlo_op`` stat if
    it has one (a GPU event is named after its kernel), else its name."""
    for key, value in event.stats:
        if key == "hlo_op":
            return str(value)
    return event.name


def from_profile(profile, program, path: str | None = None) -> Trace:
    """A :class:`Trace` of the ``ProfileData`` events that stand for an instruction of
    ``program``: on the device planes if any, else the host's (none counted twice).  A
    CPU program's events are read from the host's planes when the device planes hold
    none of them (on a machine with a GPU beside the CPU devices); a GPU program's only
    from the device planes."""
    ops = _instructions(program.text)
    planes = list(profile.planes)
    device = [p for p in planes if p.name.startswith("/device:")]

    def events_on(chosen):
        return [Event(name, ops[name], plane.name, line.name, float(e.start_ns),
                      float(e.duration_ns))
                for plane in chosen for line in plane.lines for e in line.events
                if (name := instruction_of(e)) in ops]

    host = [p for p in planes if p not in device]
    events = events_on(device or host)
    if not events and program.compiler == "cpu":
        events = events_on(host)
    return Trace(events, program, path)


def read(path, program) -> Trace:
    """Read an ``.xplane.pb`` written by ``jax.profiler.trace`` against ``program``."""
    import jax

    return from_profile(jax.profiler.ProfileData.from_file(str(path)), program,
                        str(path))


# region: traces.record
def record(fn, *args, steps: int, log_dir) -> Path:
    """Run ``fn(*args)`` ``steps`` times, each annotated and waited for, inside
    ``jax.profiler.trace(log_dir)``; return the new ``.xplane.pb`` (``RuntimeError``
    unless exactly one).  Run ``fn`` once before, so that the trace holds no compile."""
    import jax

    log_dir = Path(log_dir)
    before = set(log_dir.glob("plugins/profile/*/*.xplane.pb"))
    with jax.profiler.trace(str(log_dir)):
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation("step", step_num=i):
                jax.block_until_ready(fn(*args))
    new = sorted(set(log_dir.glob("plugins/profile/*/*.xplane.pb")) - before)
    if len(new) != 1:
        raise RuntimeError(f"expected one new trace under {log_dir}, found {new}")
    return new[0]
# endregion
