"""A time model of one network step that counts what the compiled program does.

Six terms per step and device on n devices: memory, split (XLA's bytes accessed by the
time loop's body, fitted as a / n + b over CPU compiles: the only term that shrinks);
memory on every device (b); exchange over the link (the all-gathers' result bytes);
collective latency (collectives x NCCL's ring model: grows with n); kernel launches
(from GPU-target HLO; a run of >= 5 fusions is one CUDA graph); host round-trips (loops
of unknown trip count).  :func:`check_bytes` fails a model that divides a non-shrinking
term by ``n`` (``tests/test_coba_timemodel.py`` plants one).  :data:`HARDWARE`
(sources in :data:`SOURCES`) is H200s, 8 per NVLink node, nodes on InfiniBand.  Byte
counts are XLA:CPU's cost analysis of one step: logical traffic, not a GPU figure.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["HARDWARE", "SOURCES", "Census", "Term", "fit_bytes", "program_bytes",
           "census_counts", "allgather_latency", "link_seconds", "terms",
           "step_seconds", "dominant", "curve", "check_bytes", "s_per_sim_s",
           "DEVICE_COUNTS", "predicted_bytes", "measure", "measure_at"]

from ..hardware import HARDWARE, SOURCES, allgather_latency, link_seconds  # noqa: E402

DEVICE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass
class Census:
    """What one delivery's compiled step does, per device and step, at ``neurons``.

    Bytes accessed on ``n`` devices fit ``split_bytes / n + fixed_bytes``;
    ``exchange_bytes``: the all-gathers' result bytes; ``collectives``, ``kernels``,
    ``host_syncs``: per step.  All bytes scale linearly with the neuron count.
    """

    name: str
    neurons: int
    split_bytes: float
    fixed_bytes: float
    exchange_bytes: float
    collectives: int
    kernels: int        # launches per step: kernels, or CUDA graphs of several
    host_syncs: int = 0
    source: dict = field(default_factory=dict)

    def at(self, neurons: int) -> "Census":
        """The same program at another size: bytes scale with the neurons."""
        f = neurons / self.neurons
        return Census(self.name, neurons, self.split_bytes * f, self.fixed_bytes * f,
                      self.exchange_bytes * f, self.collectives, self.kernels,
                      self.host_syncs, dict(self.source, scaled_from=self.neurons))

    def asdict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Term:
    name: str
    seconds: float
    shrinks: bool


def fit_bytes(counts, measured) -> tuple[float, float]:
    """Least-squares ``(split, fixed)``: ``measured[i] ~ split / counts[i] + fixed``."""
    x = np.stack([1 / np.asarray(counts, float), np.ones(len(counts))], axis=1)
    (split, fixed), *_ = np.linalg.lstsq(x, np.asarray(measured, float), rcond=None)
    return float(split), float(fixed)


def program_bytes(compiled) -> float:
    """Bytes one device accesses per step: XLA:CPU's cost analysis of the time loop's
    body (:meth:`shardbook.hlo.Program.time_loop`), or of the whole program if it has
    no loop, for a CPU-compiled ``jax.stages.Compiled`` or a ``shardbook.gputarget``
    :class:`shardbook.hlo.Program` of target ``"cpu"``.  What XLA hoisted out of the
    loop runs once per call, so it is left out; a loop inside the body counts once, and
    an unrolled body counts as one step.  ``ValueError`` for a custom call (XLA counts
    its work as nothing), a GPU program, or a program stored without its text."""
    from .. import hlo, private

    prog = compiled if isinstance(compiled, hlo.Program) else \
        hlo.Program(compiled.as_text())
    calls = prog.custom_calls
    if calls:
        raise ValueError(
            "XLA's cost analysis counts no bytes inside a custom call "
            f"({', '.join(calls)}): compile the XLA path (the push delivery: "
            "kernel='xla'), the one a GPU runs, to count its work")
    if isinstance(compiled, hlo.Program):
        cpu = compiled.compiler == "cpu"
    else:
        import jax

        cpu = all(d.platform == "cpu" for sharding in jax.tree.leaves(
            compiled.input_shardings) for d in sharding.device_set)
    if not cpu:
        raise ValueError("program_bytes counts XLA:CPU programs (a GPU-target compile "
                         "without a GPU reports no cost analysis): compile on "
                         "book.cpu_devices()")
    if prog.text is None:
        raise ValueError("this Program was stored without its text: compile it again")
    loops = [w for w in prog.whiles if w.outer is None]
    return private.hlo_bytes_accessed(prog.text, prog.time_loop().body if loops
                                      else None)


_NOT_KERNELS = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant",
                "all-gather-done", "all-reduce-done", "collective-permute-done",
                "async-done", "copy-done", "partition-id", "replica-id", "after-all",
                "opt-barrier"}
_COLLECTIVE = re.compile(r"^(all-gather|all-reduce|reduce-scatter|collective-permute|"
                         r"all-to-all)(-start)?$")


def census_counts(text: str) -> dict:
    """Per-step ``kernels`` (top-level instructions of the time loop's body that run as
    a kernel or collective), ``launches`` (:func:`_launches`), ``collectives`` and
    ``host_syncs`` (``while`` loops of unknown trip count in the body) of HLO ``text``.
    """
    from .. import hlo

    prog = hlo.Program(text)
    loop = prog.time_loop()
    ops = prog.body_ops(loop)
    kernels = [op for op in ops if op not in _NOT_KERNELS]
    collectives = sum(bool(_COLLECTIVE.match(op)) for op in ops)
    syncs = sum(1 for w in prog.whiles
                if w.computation == loop.body and w.known_trip_count is None)
    return dict(
        kernels=len(kernels),
        launches=_launches(kernels),
        collectives=collectives,
        host_syncs=syncs,
    )


# XLA:GPU's defaults (xla/debug_options_flags.cc): fusions, library and custom calls are
# recorded into command buffers (CUDA graphs), a run of at least 5 becoming one graph
# (xla_gpu_graph_min_graph_size); collectives, loops and conditionals are not.
_CAPTURED = {"fusion", "copy", "custom-call"}
GRAPH_MIN_SIZE = 5


def _launches(kernels: list[str]) -> int:
    """Launches per step: each run of capturable kernels of at least GRAPH_MIN_SIZE is
    one CUDA graph, shorter runs and everything else launch one by one."""
    out, run = 0, 0
    for op in kernels + ["<end>"]:
        if op in _CAPTURED:
            run += 1
            continue
        out += 1 if run >= GRAPH_MIN_SIZE else run
        run = 0
        out += op != "<end>"
    return out


def terms(c: Census, n: int, hw: dict = HARDWARE) -> list[Term]:
    """The step's terms on ``n`` devices; only the split memory is divided by ``n``."""
    return [
        Term("memory, split", c.split_bytes / n / hw["hbm_bytes_per_s"], True),
        Term("memory, on every device", c.fixed_bytes / hw["hbm_bytes_per_s"], False),
        Term("exchange over the link", link_seconds(c.exchange_bytes, n, hw), False),
        Term("collective latency", c.collectives * allgather_latency(n, hw), False),
        Term("kernel launches", c.kernels * hw["launch_s"], False),
        Term("host round-trips", c.host_syncs * hw["host_sync_s"], False),
    ]


def step_seconds(c: Census, n: int, hw: dict = HARDWARE) -> float:
    return sum(t.seconds for t in terms(c, n, hw))


def s_per_sim_s(c: Census, n: int, dt_ms: float = 0.1, hw: dict = HARDWARE) -> float:
    """Predicted seconds per simulated second (``1000 / dt_ms`` steps)."""
    return step_seconds(c, n, hw) * 1000 / dt_ms


def dominant(c: Census, n: int, hw: dict = HARDWARE) -> str:
    return max(terms(c, n, hw), key=lambda t: t.seconds).name


def curve(c: Census, counts=DEVICE_COUNTS, hw: dict = HARDWARE) -> dict:
    """Plot data: per device count, each term's seconds, total and dominant term."""
    rows = []
    for n in counts:
        ts = terms(c, n, hw)
        rows.append(dict(devices=n, total_s=sum(t.seconds for t in ts),
                         dominant=max(ts, key=lambda t: t.seconds).name,
                         **{t.name: t.seconds for t in ts}))
    return dict(name=c.name, neurons=c.neurons, rows=rows,
                shrinks={t.name: t.shrinks for t in terms(c, 1, hw)})


def predicted_bytes(c: Census, n: int, hw: dict = HARDWARE) -> float:
    """Bytes per device and step that the memory terms charge."""
    return sum(t.seconds for t in terms(c, n, hw)
               if t.name.startswith("memory")) * hw["hbm_bytes_per_s"]


def check_bytes(c: Census, measured: dict, rtol: float = 0.1,
                model=predicted_bytes) -> None:
    """Raise ``AssertionError`` where the model's bytes per device miss the compiled
    programs' ``{n: bytes}`` (same neuron count) by more than ``rtol``."""
    bad = []
    for n, got in sorted(measured.items()):
        want = model(c, n)
        if abs(want - got) > rtol * got:
            bad.append(f"{n} device(s): model {want:,.0f} B, program {got:,.0f} B")
    if bad:
        raise AssertionError(f"{c.name}: the time model's bytes per device disagree "
                             "with the compiled program:\n  " + "\n  ".join(bad))


def measure(conn: str, scale: float = 1, counts=(1, 2, 4), devices=None, steps: int = 4,
            **kwargs) -> tuple[Census, dict]:
    """``(Census, {n: bytes per device})`` of ``build(devices[:n], scale=scale,
    conn=conn, **kwargs)``'s step for each ``n`` in ``counts``: bytes fitted over the
    counts, the rest read from the largest count's XLA:CPU program."""
    import jax

    from .network import build
    from .run import Simulation

    devices = list(devices) if devices is not None else jax.devices()
    measured, compiled = {}, None
    for n in counts:
        net = build(devices[:n], scale=scale, conn=conn, **kwargs)
        compiled = Simulation(net, record=()).compile(steps)
        measured[n] = program_bytes(compiled)
    census = _census(conn, net.n_exc + net.n_inh, measured, compiled.as_text(),
                     "XLA:CPU cost analysis of the loop body", kwargs)
    return census, measured


def measure_at(conn: str, neurons: int, counts=(1, 2, 4, 8), steps: int = 4,
               **kwargs) -> tuple[Census, dict]:
    """:func:`measure` at a size too large to build: programs traced at ``neurons``
    (``shardbook.gputarget_steps.coba_hh``), compiled for ``n`` of 8 simulated CPU
    devices by ``shardbook.gputarget`` (stored by ``lab/gpu_programs.py``, else in a
    child process); nothing that size is allocated."""
    from .. import gputarget

    jobs = [dict(builder="shardbook.gputarget_steps:coba_hh", target="cpu", devices=n,
                 kwargs=dict(conn=conn, neurons=neurons, steps=steps, **kwargs))
            for n in counts]
    progs = gputarget.programs(jobs, timeout=900)
    measured = {n: program_bytes(p) for n, p in zip(counts, progs)}
    text = progs[-1].text
    census = _census(conn, neurons, measured, text,
                     "XLA:CPU cost analysis of the loop body, traced at size", kwargs)
    return census, measured


def _census(conn: str, neurons: int, measured: dict, text: str, how: str,
            kwargs: dict) -> Census:
    """The Census of ``conn``: the bytes fit of ``measured`` (``{n: bytes}``, read by
    ``how``), the all-gathers and counts of the largest count's program ``text``."""
    from .. import hlo

    counts = list(measured)
    split, fixed = fit_bytes(counts, list(measured.values()))
    gathered = sum(c.nbytes for c in hlo.Program(text).collectives
                   if c.per_step and c.op == "all-gather")
    counted = census_counts(text)
    return Census(conn, neurons, split, fixed, float(gathered),
                  counted["collectives"], counted["launches"], counted["host_syncs"],
                  dict(bytes=f"{how}, n = " + ", ".join(map(str, counts)),
                       counts=f"XLA:CPU HLO, {max(counts)} device(s)",
                       kwargs={k: str(v) for k, v in kwargs.items()}))
