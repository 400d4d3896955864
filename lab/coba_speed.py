#!/usr/bin/env python
"""Chapter 4's speed data: fair timings, the peer, the time model and the CPU scaling
table.

    BOOK_NUM_DEVICES=8 python lab/coba_speed.py --out book/data/coba_speed.json
    BOOK_NUM_DEVICES=8 python lab/coba_speed.py --only delivery --out ...  # one section

Not part of ./ci/test (about half an hour on 2 cores).  Sections, each rewritten in the
file as it finishes (``--only`` runs some and keeps the others):

* ``delivery``: the delivery alone (``coba.timing.time_delivery``): index matrix, event
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
from pathlib import Path

import coba_cli  # lab/coba_cli.py

from shardbook import gputarget, provenance
from shardbook.hlo import Program

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("delivery", "steps", "model", "scaling")
SCHEMA = "shardbook.coba-speed/1"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def delivery(book, coba, args) -> list:
    out = []
    devices = book.speed_devices()
    for scale in args.delivery_scales:
        spikes = coba.timing.record_spikes(
            args.delivery_steps, warmup=1000, devices=devices[:1], scale=scale
        )
        for k in (80, 800):
            for nd in sorted({1, len(devices)}):
                before = load()
                res = coba.timing.time_delivery(
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
