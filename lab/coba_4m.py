#!/usr/bin/env python
"""Four million COBA-HH neurons on 8 simulated CPU devices, with the push delivery.

    python lab/coba_4m.py --out book/data/coba_4m.json  # under a minute, 4 GB

Not part of ./ci/test.  The network is chapter 4's million-neuron path at 4x the size:
``graph="rows"`` (each device draws its own block's synapses by presynaptic row), the
benchmark's randomised start, the push delivery (``conn="push"``), spike counters per
neuron.  The file records, with provenance: build, compile and run seconds; the rate;
synaptic events and spikes per step; the largest burst per device; the exchange bytes
per step (from the compiled program) beside the bool all-gather's; and the ledger per
device (state, delays, connectivity, counters from the shards; arguments, outputs,
temporaries and peak of the compiled program against ``coba.predict``).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import coba_cli  # lab/coba_cli.py
import provenance  # lab/provenance.py
from coba_regimes import machine  # lab/coba_regimes.py

from shardbook.hlo import Program

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "shardbook.coba-4m/1"


def check(data: dict) -> dict:
    """What the file must show (the script checks it before writing; tests/ checks the
    stored file): its schema and provenance, the shards' bytes equal to the ledger's,
    the compiled peak within the ledger's tolerance, nothing dropped, and an exchange
    of at most 1/8 of the bools'.  Raises ``ValueError`` naming what fails."""
    bad = [k for k in ("schema", "provenance", "neurons", "ledger", "burst")
           if k not in data]
    if bad:
        raise ValueError(f"coba_4m file lacks {bad}")
    prov, led = data["provenance"], data["ledger"]
    pred, got, xla = led["predicted"], led["shards"], led["compiled"]
    if data["schema"] != SCHEMA:
        bad.append(f"schema {data['schema']!r}, not {SCHEMA!r}")
    bad += [f"provenance.{k}" for k in ("versions", "date", "command", "machine")
            if k not in prov]
    bad += [f"{cat}: shards {got[cat]}, ledger {pred[cat]}"
            for cat in ("state", "delays", "connectivity", "counters")
            if got[cat] != pred[cat]]
    if xla["arguments"] != pred["arguments"]:
        bad.append(f"arguments: compiled {xla['arguments']}, "
                   f"ledger {pred['arguments']}")
    if abs(xla["peak"] - pred["peak"]) > led["tolerance"]:
        bad.append(f"peak: compiled {xla['peak']}, ledger {pred['peak']}")
    if any(dropped for dropped, _ in data["burst"].values()):
        bad.append(f"spikes or events dropped: {data['burst']}")
    if data["exchange_bytes_per_step"] > data["neurons"] / 8:
        bad.append(f"exchange {data['exchange_bytes_per_step']} B > 1/8 of the bools'")
    if bad:
        raise ValueError("coba_4m file: " + "; ".join(bad))
    return data


def main(argv=None) -> int:
    p = coba_cli.parser(__doc__, out=ROOT / "book" / "data" / "coba_4m.json")
    p.add_argument("--scale", type=int, default=960)  # 960 x 4,200 = 4,032,000
    p.add_argument("--steps", type=int, default=200)  # 20 ms
    p.add_argument("--devices", type=int, default=8)
    args = p.parse_args(argv)
    book = coba_cli.book(devices=args.devices)
    import jax
    import numpy as np

    from shardbook import coba
    devices = book.devices()[: args.devices]
    n = len(devices)
    load = [os.getloadavg()]
    t0 = time.perf_counter()
    net = coba.build(
        devices, scale=args.scale, conn="push", graph="rows", start="random"
    )
    jax.block_until_ready([v.value for v in net.vars().values()])
    build_s = time.perf_counter() - t0
    sim = coba.Simulation(net, record=("count",))
    sim.compile(args.steps)
    _, run_s = sim.timed_run(args.steps)
    load.append(os.getloadavg())
    neurons = net.n_exc + net.n_inh
    counts = {p: np.asarray(c.value, np.int64) for p, c in sim.counts.items()}
    deg = coba.timing.out_degrees(net)
    spikes = sum(int(c.sum()) for c in counts.values())
    events = sum(float(counts[p] @ deg[p]) for p in counts) / args.steps
    text = sim.compiled[args.steps].as_text()
    step = [c for c in Program(text).collectives if c.per_step]
    pred = coba.predict(net.n_exc, net.n_inh, n, "push", graph="rows", counters=True)
    got = coba.measured_bytes(net)
    xla = coba.compiled_stats(sim.compiled[args.steps])
    in_degree = {
        name: float(
            np.diff(np.asarray(proj.comm.op.indptr.value).reshape(n, -1), axis=1).sum()
            / proj.comm.shape[1]
        )
        for name, proj in net.projections.items()
    }
    data = dict(
        schema=SCHEMA,
        provenance=dict(
            provenance.provenance(
                "python lab/coba_4m.py " + " ".join(argv or sys.argv[1:])
            ),
            machine=machine(),  # the CPU and its cores: the seconds are this CPU's
        ),
        load_average=[[round(x, 2) for x in la] for la in load],
        neurons=neurons,
        devices=n,
        steps=args.steps,
        sim_ms=args.steps * coba.DT,
        conn="push",
        graph="rows",
        start="random",
        build_s=build_s,
        compile_s=sim.compile_s[args.steps],
        run_s=run_s,
        # this process's peak resident memory (Linux reports KiB)
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        s_per_sim_s=run_s / (args.steps * coba.DT * 1e-3),
        rate_hz=spikes / neurons / (args.steps * coba.DT * 1e-3),
        spikes_per_step=spikes / args.steps,
        events_per_step=events,
        mean_in_degree=in_degree,
        burst=coba.push.burst_stats(net),
        spike_capacity={p: x.capacity for p, x in net.exchanges.items()},
        exchange_bytes_per_step=sum(c.nbytes for c in step),
        exchange_shapes=[f"{c.op} {c.shapes}" for c in step],
        bool_exchange_bytes_per_step=neurons,
        ledger=dict(
            predicted=pred,
            shards=got,
            compiled=xla,
            tolerance=coba.peak_tolerance(pred["temporaries"]),
        ),
    )
    check(data)
    return coba_cli.save(
        args.out, data,
        f"{neurons:,} neurons on {n} devices: build {build_s:.0f} s, compile "
        f"{data['compile_s']:.0f} s, {args.steps} steps in {run_s:.1f} s "
        f"({data['s_per_sim_s']:.0f} s per simulated s), {data['rate_hz']:.1f} Hz, "
        f"{events:,.0f} events per step, {data['exchange_bytes_per_step']:,} B "
        f"exchanged per step (bools: {neurons:,}); wrote {args.out}",
    )


if __name__ == "__main__":
    sys.exit(main())
