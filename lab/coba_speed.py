#!/usr/bin/env python
"""Chapter 4's speed data: fair timings, the peer, the time model and the CPU scaling
table.

    BOOK_NUM_DEVICES=8 python lab/coba_speed.py --out book/data/coba_speed.json
    BOOK_NUM_DEVICES=8 python lab/coba_speed.py --only delivery --out ...  # one section

Not part of ./ci/test (about half an hour on 2 cores).  Sections, each rewritten in the
file as it finishes (``--only`` runs some and keeps the others):

* ``delivery``: the delivery alone (:func:`time_delivery`): index matrix, event
  CSR, push delivery and brainevent's kernel per shard, interleaved, on the same spike
  trains recorded from the active network of 4,200 and 16,800 neurons, on fixed
  in-degree graphs with K = 80 and 800, on 1 and 8 devices;
* ``steps``: the whole step of the active network, the same four deliveries side by side
  (``coba.timing.time_steps``), at 4,200 and 16,800 neurons (K = 80) and at 4,200 with
  K = 800 in the driven setting that stays active (``coba.timing.ACTIVE_K800``);
* ``model``: the time model's census of each delivery (XLA:CPU bytes at 1, 2, 4, 8
  devices; kernels, collectives, host round-trips and exchange bytes from the compile
  for 8 x H200), its curves over 1-512 GPUs, and the compile for 64 H200s (8 hosts x 8)
  at 100,800,000 neurons with both deliveries, checked against the ledger;
* ``scaling``: bytes per device, exchange bytes per step and events per step for
  n = 1, 2, 4, 8 devices and 4,200 to 1,008,000 neurons (push delivery).

Every timing prints the load average beside it; the file records it.  Times are of THIS
CPU, with simulated devices sharing its cores: ratios between deliveries measured side
by side are what carries over, not the absolute figures.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import coba_cli  # lab/coba_cli.py
import numpy as np
import provenance  # lab/provenance.py

from shardbook import gputarget
from shardbook.hlo import Program

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("delivery", "steps", "model", "scaling")
SCHEMA = "shardbook.coba-speed/1"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------ the delivery alone, on recorded spike trains
def fixed_graph(n: int, k: int, seed: int = 0) -> np.ndarray:
    """``[k, n]`` int32 sources: each of ``n`` neurons gets ``k`` inputs drawn uniformly
    (with replacement) from the same ``n`` neurons: a fixed in-degree graph."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, (k, n), dtype=np.int32)


def record_spikes(steps: int, warmup: int = 1000, devices=None, **net_kwargs):
    """``bool[steps, N]``: the spikes of an active network (E then I neurons), after
    ``warmup`` steps of transient.  Raises ``SilentWindow`` if it is silent."""
    import jax

    from shardbook import coba

    devices = list(devices) if devices is not None else jax.devices()[:1]
    net = coba.build(devices, **net_kwargs)
    sim = coba.Simulation(net, record=("spike",))
    if warmup:
        sim.run(warmup)
    out = sim.run(steps)
    spikes = np.concatenate([np.asarray(out["E.spike"]), np.asarray(out["I.spike"])], 1)
    if not spikes.any():
        raise coba.timing.SilentWindow(
            f"no spikes in {steps} steps after {warmup} of warm-up")
    return spikes


DELIVERIES = ("index", "event", "push", "brainevent")


def delivery_functions(sources: np.ndarray, devices, kinds=DELIVERIES,
                       spike_capacity: float | None = None) -> dict:
    """``{kind: jitted f(spike_train) -> summed counts}`` for one graph on a 1-D mesh.

    ``sources``: ``[k, n]`` (the graph, post neurons split over the devices);
    ``f`` takes ``bool[T, n]`` split along neurons, runs ``T`` steps of exchange and
    delivery in a ``lax.scan``, and returns the counts summed over the steps (float32,
    exact), split along neurons: the same array for every kind.

    Long because: the deliveries share one graph, mesh and capacity, set up once above
    them; each delivery is a few lines.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from shardbook import coba

    kernels, peer, push, NEURON = coba.kernels, coba.peer, coba.push, coba.NEURON
    if spike_capacity is None:
        spike_capacity = push.SPIKE_CAPACITY
    k, n = sources.shape
    mesh = jax.sharding.Mesh(np.asarray(devices), (NEURON,))
    d = mesh.shape[NEURON]
    if n % d:
        raise ValueError(f"{n} neurons do not split over {d} devices")
    n_local = n // d
    split2 = NamedSharding(mesh, P(None, NEURON))
    src = jax.device_put(sources, split2)
    indptr, indices = jax.jit(jax.shard_map(
        partial(coba.local_csr, n_pre=n), mesh=mesh, in_specs=P(None, NEURON),
        out_specs=(P(NEURON), P(NEURON)), check_vma=False))(src)
    cap = push.spike_capacity(n_local, spike_capacity)
    slots = d * cap
    events_cap = push.event_capacity(slots, k * n_local / n)
    chunk = coba.chunk_size(k * n_local)
    cpu = kernels.available()

    def gather(s):  # the bool exchange: every device gets every spike
        return jax.lax.all_gather(s, NEURON, tiled=True) if d > 1 else s

    def index_step(s, conn, indptr, indices):
        return jnp.sum(gather(s)[conn], axis=0, dtype=jnp.float32)

    def event_step(s, conn, indptr, indices):
        return coba.deliver(gather(s), indptr, indices, n_local=n_local, chunk=chunk)

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


def time_delivery(spikes: np.ndarray, k: int, devices, kinds=DELIVERIES,
                  repeats: int = 5, seed: int = 0, check: bool = True) -> dict:
    """Delivery alone: ``{kind: Timing}`` on the recorded ``spikes`` (``bool[T, n]``)
    and a fixed in-degree ``k`` graph of the same ``n`` neurons, on ``devices``.

    Every kind gets the same graph and the same spikes; ``check`` asserts that they
    deliver the same counts.  Raises ``SilentWindow`` if the spikes carry no event.
    """
    import jax

    from shardbook import coba

    timing = coba.timing
    t, n = spikes.shape
    sources = fixed_graph(n, k, seed)
    events = float((spikes.astype(np.int64) @ timing.out_degree(sources, n)).sum()) / t
    if events == 0:
        raise timing.SilentWindow("these spike trains deliver no synaptic event")
    fns = delivery_functions(sources, devices, kinds)
    train = jax.device_put(spikes, fns["_sharding"])
    peak = int(spikes.reshape(t, len(devices), -1).sum(axis=2).max())
    if peak > fns["_capacity"]:
        raise coba.DeliveryOverflow(
            f"a device had {peak} spikes in one step, the push buffer holds "
            f"{fns['_capacity']}: raise spike_capacity")
    results = {kind: fns[kind](train) for kind in kinds}
    if check:
        ref = np.asarray(results[kinds[0]])
        for kind in kinds[1:]:
            np.testing.assert_array_equal(np.asarray(results[kind]), ref, err_msg=kind)
    samples = timing.interleave(
        {kind: (lambda f=fns[kind]: jax.block_until_ready(f(train))) for kind in kinds},
        repeats=repeats)
    return {kind: timing.Timing(kind, float(np.median(s)) / t, events,
                                [x / t for x in s],
                                dict(neurons=n, k=k, devices=len(devices), steps=t))
            for kind, s in samples.items()}


def delivery(book, coba, args) -> list:
    out = []
    devices = book.speed_devices()
    for scale in args.delivery_scales:
        spikes = record_spikes(
            args.delivery_steps, warmup=1000, devices=devices[:1], scale=scale
        )
        for k in (80, 800):
            for nd in sorted({1, len(devices)}):
                before = load()
                res = time_delivery(
                    spikes, k, devices[:nd], repeats=args.repeats
                )
                print(
                    f"[delivery] {spikes.shape[1]:,} neurons, K = {k}, {nd} device(s), "
                    f"load {before}",
                    flush=True,
                )
                for t in res.values():
                    print("   " + t.line(), flush=True)
                    out.append(dict(t.asdict(), load=before))
    return out


def steps(book, coba, args) -> list:
    out = []
    devices = book.speed_devices()
    kinds = {kind: dict(conn=kind) for kind in ("index", "event", "push", "brainevent")}
    configs = [(f"{4200 * s:,} neurons, K = 80", dict(scale=s), {}) for s in (1, 4)]
    configs.append(
        (
            "4,200 neurons, K = 800 (driven)",
            dict(scale=1, **coba.timing.ACTIVE_K800),
            dict(spike_capacity=0.25),
        )
    )
    for nd in sorted({1, len(devices)}):
        for label, common, push_extra in configs:
            variants = {
                k: dict(v, **(push_extra if k == "push" else {}))
                for k, v in kinds.items()
            }
            before = load()
            res = coba.timing.time_steps(
                variants,
                steps=args.step_steps,
                warmup=1000,
                repeats=args.repeats,
                devices=devices[:nd],
                **common,
            )
            print(f"[steps] {label}, {nd} device(s), load {before}", flush=True)
            for t in res.values():
                print(
                    f"   {t.line()}  {t.s_per_sim_s:.2f} s wall per simulated s, "
                    f"{t.extra['rate_hz']:.0f} Hz",
                    flush=True,
                )
                out.append(dict(t.asdict(), label=label, load=before))
    return out


def model(book, coba, args) -> dict:
    tm, gt = coba.timemodel, gputarget
    builder = "shardbook.gputarget_steps:coba_hh"
    deliveries = dict(index={}, event={}, push=dict(kernel="xla"))
    def job(conn, neurons, **where):  # where: devices (8 unless given), hosts
        return dict(builder=builder, text=True, **{"devices": 8, **where},
                    kwargs=dict(conn=conn, steps=10, neurons=neurons))

    big = 100_800_000
    jobs = [job(c, 840_000) for c in deliveries]
    jobs += [job(c, big, hosts=8) for c in ("index", "push")]
    jobs += [job(c, 4200, devices=1) for c in deliveries]
    pending = gt.start_jobs(jobs, timeout=3600)
    censuses, measured = {}, {}
    for conn, kw in deliveries.items():
        censuses[conn], measured[conn] = tm.measure(
            conn, scale=1, counts=(1, 2, 4, 8), devices=book.devices(), **kw
        )
        tm.check_bytes(censuses[conn], measured[conn])
        print(f"[model] {conn}: {censuses[conn]}", flush=True)
    reports = pending.result()
    out = dict(census={}, measured={}, curves={}, gpu8={}, plan64={})
    def collectives(prog):  # JSON-ready
        return [asdict(c) for c in prog.collectives]

    for (conn, _), rep in zip(deliveries.items(), reports[:3]):
        counts = tm.census_counts(rep.text)
        c = censuses[conn]
        c.kernels, c.collectives, c.host_syncs = (
            counts["launches"],
            counts["collectives"],
            counts["host_syncs"],
        )
        c.source["counts"] = "XLA:GPU HLO, 8 x H200, 840,000 neurons"
        out["census"][conn] = c.asdict()
        out["measured"][conn] = {str(n): b for n, b in measured[conn].items()}
        out["gpu8"][conn] = dict(
            memory=rep.memory,
            collectives=collectives(rep),
            counts=counts,
            compile_s=rep.meta["compile_s"],
        )
        out["curves"][conn] = tm.curve(c.at(big))
    out["gpu1"] = {}
    for conn, rep in zip(deliveries, reports[5:]):
        out["gpu1"][conn] = dict(
            memory=rep.memory,
            collectives=collectives(rep),
            counts=tm.census_counts(rep.text),
            compile_s=rep.meta["compile_s"],
        )
    n_exc = round(0.8 * big)
    for conn, rep in zip(("index", "push"), reports[3:5]):
        counts = tm.census_counts(rep.text)
        step = [c for c in collectives(rep) if c["per_step"]]
        exchange = sum(c["nbytes"] for c in step)
        pred = coba.predict(n_exc, big - n_exc, 64, conn, counters=True, platform="gpu")
        assert rep.memory["arguments"] == pred["arguments"], (rep.memory, pred)
        # bools, or the int32 ids of the gathered index buffers
        want = big if conn == "index" else coba.gathered_bytes(n_exc, big - n_exc, 64)
        assert exchange == want, (conn, exchange, want)
        c = censuses[conn].at(big)
        c.kernels, c.collectives, c.host_syncs = (
            counts["launches"],
            counts["collectives"],
            counts["host_syncs"],
        )
        c.exchange_bytes = float(exchange)
        out["plan64"][conn] = dict(
            neurons=big,
            devices=64,
            hosts=8,
            memory=rep.memory,
            predicted=pred,
            exchange_bytes_per_step=exchange,
            collectives=step,
            counts=counts,
            s_per_sim_s=tm.s_per_sim_s(c, 64),
            dominant=tm.dominant(c, 64),
            terms={t.name: t.seconds for t in tm.terms(c, 64)},
        )
        print(
            f"[model] 64 x H200, {big:,} neurons, {conn}: "
            f"{rep.memory['arguments'] / 1e9:.2f} GB arguments per GPU, "
            f"{exchange:,} B exchanged per step, {tm.s_per_sim_s(c, 64):.3f} s per "
            f"simulated s ({tm.dominant(c, 64)})",
            flush=True,
        )
    return out


def scaling(book, coba, args) -> list:
    out = []
    devices = book.devices()
    for scale in args.scaling_scales:
        for nd in (1, 2, 4, 8):
            if nd > len(devices):
                continue
            graph = "rows" if scale >= 10 else "fixed"
            t0 = time.perf_counter()
            net = coba.build(
                devices[:nd], scale=scale, conn="push", graph=graph, start="random"
            )
            sim = coba.Simulation(net, record=("count",))
            sim.run(args.scaling_steps)
            n = net.n_exc + net.n_inh
            spikes = sum(int(c.value.sum()) for c in sim.counts.values())
            deg = coba.timing.out_degrees(net)
            events = (
                sum(float(sim.counts[p].value.astype("int64") @ deg[p]) for p in deg)
                / args.scaling_steps
            )
            text = sim.compiled[args.scaling_steps].as_text()
            exchange = sum(c.nbytes for c in Program(text).collectives
                           if c.per_step)
            got = coba.measured_bytes(net)
            row = dict(
                neurons=n,
                devices=nd,
                graph=graph,
                bytes_per_device=sum(got.values()),
                by_category=got,
                predicted=coba.predict(
                    net.n_exc, net.n_inh, nd, "push", graph=graph, counters=True
                ),
                exchange_bytes_per_step=exchange,
                bool_exchange_bytes_per_step=n if nd > 1 else 0,
                bits_exchange_bytes_per_step=sum(
                    nd * -(-(m // nd) // 8) for m in (net.n_exc, net.n_inh)
                )
                if nd > 1
                else 0,
                events_per_step=events,
                spikes_per_step=spikes / args.scaling_steps,
                steps=args.scaling_steps,
                wall_s=time.perf_counter() - t0,
            )
            print(
                f"[scaling] {n:>9,} neurons, {nd} device(s): "
                f"{row['bytes_per_device']:,} B per device, {exchange:,} B exchanged "
                f"per step (bools: {row['bool_exchange_bytes_per_step']:,}), "
                f"{events:,.0f} events per step ({row['wall_s']:.0f} s)",
                flush=True,
            )
            out.append(row)
            del net, sim
    return out


def main(argv=None) -> int:
    p = coba_cli.parser(__doc__, out=ROOT / "book" / "data" / "coba_speed.json")
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--delivery-scales", type=float, nargs="+", default=[1, 4])
    p.add_argument("--delivery-steps", type=int, default=200)
    p.add_argument("--step-steps", type=int, default=500)
    p.add_argument("--scaling-scales", type=float, nargs="+", default=[1, 10, 60, 240])
    p.add_argument("--scaling-steps", type=int, default=200)
    args = p.parse_args(argv)
    book = coba_cli.book()
    from shardbook import coba
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    if data.get("schema") not in (None, SCHEMA):
        raise SystemExit(f"{args.out} is not a {SCHEMA} file")
    data["schema"] = SCHEMA
    for section in args.only:
        t0 = time.perf_counter()
        result = dict(delivery=delivery, steps=steps, model=model, scaling=scaling)[
            section
        ](book, coba, args)
        command = "python lab/coba_speed.py " + " ".join(argv or sys.argv[1:])
        data[section] = dict(
            provenance=provenance.provenance(command),
            load_after=load(),
            seconds=time.perf_counter() - t0,
            results=result,
        )
        coba_cli.save(args.out, data, f"[speed] {section} written to {args.out} "
                      f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
