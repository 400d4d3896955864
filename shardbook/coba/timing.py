"""Fair timings of chapter 4: variants side by side, interleaved, with their work.

Rules (the book's, for every speed claim):

* variants run in one process, **interleaved** (round robin, the order rotated each
  round) and **repeated**; the figure is the **median**;
* every time is printed beside its work: **synaptic events per step** (a spike of a
  neuron with out-degree ``d`` is ``d`` events) and **events per microsecond**;
* a window with **no events is refused** (:class:`SilentWindow`), and so is a window
  with one silent chunk (a median may be that chunk's time): a silent network measures
  the delivery's fixed costs, not its work.

Two kinds of measurement:

* :func:`time_delivery`: the delivery **alone**, every representation on the **same
  recorded spike trains** of an active network (:func:`record_spikes`), on a graph of
  the in-degree under test (:func:`fixed_graph`), each with its own exchange (the bool
  all-gather, or the push delivery's compaction and index all-gather);
* :func:`time_steps` / :func:`time_network`: the whole network step of an active
  network, compilation timed apart.

Compilation is excluded from every steady-state figure and reported on its own.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from . import kernels, peer, push
from .events import chunk_size, deliver as event_deliver, local_csr
from .network import build
from .parameters import DT, K_EXC, K_INH, NEURON
from .run import Simulation

__all__ = ["SilentWindow", "Timing", "interleave", "fixed_graph", "record_spikes",
           "DELIVERIES", "delivery_functions", "time_delivery", "out_degrees",
           "time_steps", "time_network", "ACTIVE_K800"]

# The in-degree 800 network that stays active (issue 19: weights scaled by 80/K, by
# sqrt(80/K), or a raised rest all fall silent after the opening volley; this strongly
# driven setting fires at about 195 Hz).
ACTIVE_K800 = dict(k=(640, 160), weights=(2.4, 6.7))


class SilentWindow(ValueError):
    """A timed window with no synaptic events: it would time nothing."""


@dataclass
class Timing:
    """One variant's median time per step, and the work of that step."""

    name: str
    seconds_per_step: float
    events_per_step: float
    samples: list = field(default_factory=list)   # seconds per step, every repeat
    extra: dict = field(default_factory=dict)

    @property
    def events_per_us(self) -> float:
        return self.events_per_step / (self.seconds_per_step * 1e6)

    @property
    def s_per_sim_s(self) -> float:
        """Seconds of wall time per simulated second (10,000 steps of 0.1 ms)."""
        return self.seconds_per_step / (DT * 1e-3)

    def line(self, width: int = 26) -> str:
        spread = (max(self.samples) - min(self.samples)) / self.seconds_per_step
        return (f"{self.name:<{width}}{self.events_per_step:>10,.0f} events/step "
                f"{self.events_per_us:>8.1f} events/us  (spread {spread:.0%})  "
                f"{self.seconds_per_step * 1e6:.1f} us wall")

    def asdict(self) -> dict:
        out = asdict(self)
        out["events_per_us"] = self.events_per_us
        out["s_per_sim_s"] = self.s_per_sim_s
        return out


def interleave(variants: dict, repeats: int = 5, warmup: int = 1, after=None) -> dict:
    """Run each ``variants[name]()`` (it blocks until its work is done) ``warmup``
    times, then ``repeats`` rounds, the order rotated each round; returns
    ``{name: [seconds, ...]}``.  ``after(name)``, if given, runs after each timed call,
    outside its time (to read what the round did)."""
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    out = {name: [] for name in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            variants[name]()
            out[name].append(time.perf_counter() - t0)
            if after is not None:
                after(name)
    return out


# ----------------------------------------------------------- graphs and spike trains
def fixed_graph(n: int, k: int, seed: int = 0) -> np.ndarray:
    """``[k, n]`` int32 sources: each of ``n`` neurons gets ``k`` inputs drawn uniformly
    (with replacement) from the same ``n`` neurons: a fixed in-degree graph."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, (k, n), dtype=np.int32)


def record_spikes(steps: int, warmup: int = 1000, devices=None, **net_kwargs):
    """``bool[steps, N]``: the spikes of an active network (E then I neurons), after
    ``warmup`` steps of transient.  Raises :class:`SilentWindow` if it is silent."""
    devices = list(devices) if devices is not None else jax.devices()[:1]
    net = build(devices, **net_kwargs)
    sim = Simulation(net, record=("spike",))
    if warmup:
        sim.run(warmup)
    out = sim.run(steps)
    spikes = np.concatenate([np.asarray(out["E.spike"]), np.asarray(out["I.spike"])], 1)
    if not spikes.any():
        raise SilentWindow(f"no spikes in {steps} steps after {warmup} of warm-up")
    return spikes


# ---------------------------------------------------------- delivery alone, per kind
DELIVERIES = ("index", "event", "push", "brainevent")


def delivery_functions(sources: np.ndarray, devices, kinds=DELIVERIES,
                       spike_capacity: float = push.SPIKE_CAPACITY) -> dict:
    """``{kind: jitted f(spike_train) -> summed counts}`` for one graph on a 1-D mesh.

    ``sources``: ``[k, n]`` (the graph, post neurons split over the devices);
    ``f`` takes ``bool[T, n]`` split along neurons, runs ``T`` steps of exchange and
    delivery in a ``lax.scan``, and returns the counts summed over the steps (float32,
    exact), split along neurons: the same array for every kind.

    Long because: the deliveries share one graph, mesh and capacity, set up once above
    them; each delivery is a few lines.
    """
    k, n = sources.shape
    mesh = jax.sharding.Mesh(np.asarray(devices), (NEURON,))
    d = mesh.shape[NEURON]
    if n % d:
        raise ValueError(f"{n} neurons do not split over {d} devices")
    n_local = n // d
    split2 = NamedSharding(mesh, P(None, NEURON))
    src = jax.device_put(sources, split2)
    indptr, indices = jax.jit(jax.shard_map(
        partial(local_csr, n_pre=n), mesh=mesh, in_specs=P(None, NEURON),
        out_specs=(P(NEURON), P(NEURON)), check_vma=False))(src)
    cap = push.spike_capacity(n_local, spike_capacity)
    slots = d * cap
    events_cap = push.event_capacity(slots, k * n_local / n)
    chunk = chunk_size(k * n_local)
    cpu = kernels.available()

    def gather(s):  # the bool exchange: every device gets every spike
        return jax.lax.all_gather(s, NEURON, tiled=True) if d > 1 else s

    def index_step(s, conn, indptr, indices):
        return jnp.sum(gather(s)[conn], axis=0, dtype=jnp.float32)

    def event_step(s, conn, indptr, indices):
        return event_deliver(gather(s), indptr, indices, n_local=n_local, chunk=chunk)

    def brainevent_step(s, conn, indptr, indices):
        return peer.deliver(gather(s), indptr, indices, n_local)

    def push_step(s, conn, indptr, indices):
        ids, _ = push.compact_local(s, cap, cpu)
        offset = jax.lax.axis_index(NEURON) * n_local
        ids = jnp.where(ids < n_local, ids + offset, n)
        if d > 1:
            ids = jax.lax.all_gather(ids, NEURON, tiled=True)
        return push.push_local(ids, indptr, indices, n_local, events_cap, cpu)[0]

    steps = dict(index=index_step, event=event_step, push=push_step,
                 brainevent=brainevent_step)

    def make(step):
        def local(train, conn, indptr, indices):
            def body(total, s):
                return total + step(s, conn, indptr, indices), None
            return jax.lax.scan(body, jnp.zeros((n_local,), jnp.float32), train)[0]
        fn = jax.shard_map(local, mesh=mesh,
                           in_specs=(P(None, NEURON), P(None, NEURON), P(NEURON),
                                     P(NEURON)),
                           out_specs=P(NEURON), check_vma=False)
        jitted = jax.jit(fn)  # the graph as arguments: a closure would be folded in
        return lambda train: jitted(train, src, indptr, indices)

    out = {kind: make(steps[kind]) for kind in kinds}
    out["_sharding"] = split2
    out["_capacity"] = cap
    return out


def out_degree(sources: np.ndarray, n_pre: int) -> np.ndarray:
    """How many synapses each presynaptic neuron makes, from a ``[k, n_post]`` graph."""
    return np.bincount(np.asarray(sources).reshape(-1), minlength=n_pre)[:n_pre]


def time_delivery(spikes: np.ndarray, k: int, devices, kinds=DELIVERIES,
                  repeats: int = 5, seed: int = 0, check: bool = True) -> dict:
    """Delivery alone: ``{kind: Timing}`` on the recorded ``spikes`` (``bool[T, n]``)
    and a fixed in-degree ``k`` graph of the same ``n`` neurons, on ``devices``.

    Every kind gets the same graph and the same spikes; ``check`` asserts that they
    deliver the same counts.  Raises :class:`SilentWindow` if the spikes carry no event.
    """
    t, n = spikes.shape
    sources = fixed_graph(n, k, seed)
    events = float((spikes.astype(np.int64) @ out_degree(sources, n)).sum()) / t
    if events == 0:
        raise SilentWindow("these spike trains deliver no synaptic event")
    fns = delivery_functions(sources, devices, kinds)
    train = jax.device_put(spikes, fns["_sharding"])
    peak = int(spikes.reshape(t, len(devices), -1).sum(axis=2).max())
    if peak > fns["_capacity"]:
        raise push.DeliveryOverflow(
            f"a device had {peak} spikes in one step, the push buffer holds "
            f"{fns['_capacity']}: raise spike_capacity")
    results = {kind: fns[kind](train) for kind in kinds}
    if check:
        ref = np.asarray(results[kinds[0]])
        for kind in kinds[1:]:
            np.testing.assert_array_equal(np.asarray(results[kind]), ref, err_msg=kind)
    samples = interleave({kind: (lambda f=fns[kind]: jax.block_until_ready(f(train)))
                          for kind in kinds}, repeats=repeats)
    return {kind: Timing(kind, float(np.median(s)) / t, events, [x / t for x in s],
                         dict(neurons=n, k=k, devices=len(devices), steps=t))
            for kind, s in samples.items()}


# ------------------------------------------------------------------ the whole step
def out_degrees(net) -> dict:
    """``{"E": int64[n_exc], "I": int64[n_inh]}``: each neuron's synapses, all
    projections and devices together, read from the network's connectivity."""
    from .ledger import _leaf

    out = {"E": np.zeros(net.n_exc, np.int64), "I": np.zeros(net.n_inh, np.int64)}
    for name, proj in net.projections.items():
        pre, comm = name[0], proj.comm
        n_pre = out[pre].size
        if hasattr(comm, "conn"):
            src = np.asarray(_leaf(comm.conn))
            if comm.kind == "mask":
                out[pre] += src.sum(axis=1)
            else:
                out[pre] += out_degree(src[src < n_pre], n_pre)
        elif hasattr(comm.op, "indptr"):
            indptr = np.asarray(_leaf(comm.op.indptr)).reshape(-1, n_pre + 1)
            out[pre] += np.diff(indptr, axis=1).sum(axis=0)
        else:
            raise ValueError(f"{name}: no stored graph to count ({comm.kind!r})")
    return out


def _counts(sim) -> dict:
    return {p: np.asarray(c.value, np.int64) for p, c in sim.counts.items()}


def time_steps(variants: dict, steps: int = 500, warmup: int = 1000, repeats: int = 3,
               devices=None, **common) -> dict:
    """The whole step, side by side: ``{name: Timing}`` for networks built with
    ``common`` and each ``variants[name]`` (keyword arguments of :func:`build`).

    Each network runs ``warmup`` steps, then ``repeats`` interleaved chunks of ``steps``
    steps; the events per step come from each network's spike counters and out-degrees.
    ``extra`` holds the compile seconds and the mean rate (Hz) of the timed window.
    Raises :class:`SilentWindow` if any timed chunk of any network delivered no event:
    a median may be the time of a silent chunk, so every chunk must carry work.
    """
    devices = list(devices) if devices is not None else jax.devices()[:1]
    sims, degrees, compile_s = {}, {}, {}
    for name, kw in variants.items():
        net = build(devices, **{**common, **kw})
        sim = Simulation(net, record=("count",))
        sim.compile(steps)
        compile_s[name] = sim.compile_s[steps]
        if warmup:
            sim.run(warmup)
        sims[name], degrees[name] = sim, out_degrees(net)
    snaps = {name: [_counts(sim)] for name, sim in sims.items()}  # before each chunk
    samples = interleave({name: (lambda s=sim: s.run(steps)) for name, sim in
                          sims.items()}, repeats=repeats, warmup=0,
                         after=lambda name: snaps[name].append(_counts(sims[name])))
    out = {}
    for name in sims:
        for r, (a, b) in enumerate(zip(snaps[name], snaps[name][1:])):
            if sum(float((b[p] - a[p]) @ degrees[name][p]) for p in b) == 0:
                raise SilentWindow(f"{name}: no synaptic event in timed chunk {r + 1} "
                                   f"of {repeats} ({steps} steps)")
        spikes = {p: snaps[name][-1][p] - snaps[name][0][p] for p in snaps[name][0]}
        total_steps = steps * repeats
        events = sum(float(spikes[p] @ degrees[name][p]) for p in spikes) / total_steps
        n = sum(v.size for v in spikes.values())
        rate = sum(v.sum() for v in spikes.values()) / n / (total_steps * DT * 1e-3)
        out[name] = Timing(name, float(np.median(samples[name])) / steps, events,
                           [x / steps for x in samples[name]],
                           dict(compile_s=compile_s[name], rate_hz=float(rate),
                                neurons=n, devices=len(devices), steps=steps))
    return out


def time_network(
    conn: str = "push",
    graph: str = "fixed",
    neurons: int | None = None,
    scale: float = 1,
    devices=1,
    sim_ms: float = 100,
    warmup_ms: float = 100,
    repeats: int = 3,
    k=(K_EXC, K_INH),
    weights=None,
    start: str = "rest",
    **kwargs,
) -> dict:
    """The book's network timed the book's way, for a script beside another simulator.

    ``neurons`` (80 % E) or ``scale``; ``devices``: a count (the first of
    ``jax.devices()``) or a list.  Runs ``warmup_ms``, then ``repeats`` timed chunks of
    ``sim_ms`` each.  Returns ``s_per_sim_s`` (median wall seconds per simulated second,
    compilation excluded), ``compile_s``, ``events_per_step``, ``events_per_us``,
    ``rate_hz``, ``seconds_per_step``, ``samples``, and the configuration.
    """
    if isinstance(devices, int):
        devices = jax.devices()[:devices]
    sizes = None
    if neurons is not None:
        n_exc = round(0.8 * neurons)
        sizes = (n_exc, neurons - n_exc)
    steps, warmup = round(sim_ms / DT), round(warmup_ms / DT)
    kw = dict(conn=conn, graph=graph, k=k, weights=weights, start=start, **kwargs)
    kw.update(dict(sizes=sizes) if sizes is not None else dict(scale=scale))
    t = time_steps({conn: kw}, steps=steps, warmup=warmup, repeats=repeats,
                   devices=devices)[conn]
    out = t.asdict()
    out.update(t.extra, conn=conn, graph=graph, start=start, k=list(k),
               weights=None if weights is None else list(weights),
               devices=len(devices), device_kind=devices[0].device_kind,
               sim_ms=sim_ms, warmup_ms=warmup_ms)
    return out
