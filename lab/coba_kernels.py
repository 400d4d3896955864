#!/usr/bin/env python
"""Do chapter 4's CPU kernels earn their place? The push delivery with them and without.

    python lab/coba_kernels.py --out book/data/coba_kernels.json   # about a minute

Not part of ./ci/test.  On a CPU the push delivery runs its two steps (compact the
spikes, push each spike's row) as numba kernels that XLA calls through its FFI
(``shardbook.coba.kernels``); ``kernel="xla"`` runs the same steps as XLA code, the path
every GPU takes.  This script times both, and the index matrix, side by side and
interleaved (``coba.timing.time_steps``) on one CPU device, at chapter 4b's sizes, with
the events per step beside every time.  The kernels stay while a reader's run of
chapter 4 needs them: while the XLA path is several times slower on a CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import coba_cli  # lab/coba_cli.py
from coba_regimes import machine  # lab/coba_regimes.py

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "shardbook.coba-kernels/1"
VARIANTS = {"push, CPU kernels": dict(conn="push", kernel="auto"),
            "push, XLA path": dict(conn="push", kernel="xla"),
            "index matrix": dict(conn="index")}


def main(argv=None) -> int:
    p = coba_cli.parser(__doc__, out=ROOT / "book" / "data" / "coba_kernels.json")
    p.add_argument("--scales", type=float, nargs="+", default=[1.0, 10.0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    coba_cli.book(devices=1)   # the devices first, then BrainPy
    import provenance  # lab/provenance.py

    from shardbook import coba
    if not coba.kernels.available():
        raise SystemExit(f"the CPU kernels are off here: {coba.kernels.why_not()}")
    rows = []
    for scale in args.scales:
        got = coba.timing.time_steps(VARIANTS, steps=args.steps, warmup=1000,
                                     repeats=args.repeats, scale=scale)
        for name, t in got.items():
            rows.append(dict(neurons=t.extra["neurons"], variant=name,
                             us_per_step=t.seconds_per_step * 1e6,
                             events_per_step=t.events_per_step,
                             samples_us=[s * 1e6 for s in t.samples],
                             compile_s=t.extra["compile_s"]))
            print(f"{t.extra['neurons']:>7,} neurons  {name:<18} "
                  f"{t.seconds_per_step * 1e6:9.1f} us/step  "
                  f"{t.events_per_step:9,.0f} events/step", flush=True)
    cmd = "python lab/coba_kernels.py " + " ".join(sys.argv[1:] if argv is None
                                                   else argv)
    data = dict(schema=SCHEMA, provenance=dict(provenance.provenance(cmd.strip()),
                                               machine=machine()),
                rows=rows)
    speedup = {r["neurons"]: 0.0 for r in rows}
    for n in speedup:
        us = {r["variant"]: r["us_per_step"] for r in rows if r["neurons"] == n}
        speedup[n] = us["push, XLA path"] / us["push, CPU kernels"]
    data["xla_over_kernels"] = {str(n): round(s, 2) for n, s in speedup.items()}
    return coba_cli.save(
        args.out, data,
        "the XLA path over the CPU kernels: " + ", ".join(
            f"{s:.1f}x at {n:,} neurons" for n, s in speedup.items())
        + f"; wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
