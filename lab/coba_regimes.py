#!/usr/bin/env python
"""The activity regimes of COBA-HH's published forms: the data files chapter 4 reads.

    python lab/coba_regimes.py forms --out book/data/coba_forms.json
    python lab/coba_regimes.py dt --out book/data/coba_dt.json

``forms``: the three forms of ``shardbook.coba.regimes.FORMS`` (Brette et al. 2007 as
in Brian 2's COBAHH example, NEST's hh_coba, the book's variant), each with
``--bound-seeds`` seeds that make the bounds and ``--held-out`` further seeds that
check them; and the graph x start design (Bernoulli or fixed in-degree, x random,
NEST's kick or rest) at 4000 neurons with ``--cell-seeds`` seeds, which attributes
the regime difference to the graph or to the start.

``dt``: the Brette and NEST forms at dt = 0.1, 0.05 and 0.025 ms (exponential Euler,
BrainPy's ``exp_auto``), ``--dt-seeds`` seeds each: is 0.1 ms converged?

Every run: one CPU device, the transient and the window of ``regimes.PROTOCOL``, the
statistics of the window, its ISI histogram and the population rate in 10 ms bins.
The file is rewritten after every run, and a rerun skips the runs it already has, so
an interrupted script resumes.  Seeds start at 1: the chapter's own runs use seed 0,
which no bound is made from.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import coba_cli  # lab/coba_cli.py
import regime_runs as design  # lab/regime_runs.py

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict:
    """The CPU that ran it (chaos makes its last bits matter: a CPU is a new sample)."""
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    return dict(cpu=model, cores=os.cpu_count(), machine=platform.machine())


def plan_forms(args, regimes) -> list[dict]:
    jobs = []
    seeds = list(range(1, 1 + args.bound_seeds + args.held_out))
    for form, kw in regimes.FORMS.items():
        for s in seeds:
            jobs.append(dict(form=form, seed=s, dt=0.1, **kw))
    for g in regimes.GRAPHS_2X2:
        for st in design.STARTS_2X2:
            kw = design.cell(g, st)
            if any(
                kw == dict(f, sizes=tuple(f["sizes"])) for f in regimes.FORMS.values()
            ):
                continue  # a form: its first seeds are this cell's runs
            for s in range(1, 1 + args.cell_seeds):
                jobs.append(dict(form=f"cell {g}/{st}", seed=s, dt=0.1, **kw))
    return jobs


def plan_dt(args, regimes) -> list[dict]:
    return [
        dict(form=form, seed=s, dt=dt, **regimes.FORMS[form])
        for dt in args.dts
        for form in ("brette", "nest")
        for s in range(1, 1 + args.dt_seeds)
    ]


def main(argv=None) -> int:
    ap = coba_cli.parser(__doc__, "forms", "dt")
    ap.add_argument("--bound-seeds", type=int, default=16)
    ap.add_argument("--held-out", type=int, default=8)
    ap.add_argument("--cell-seeds", type=int, default=8)
    ap.add_argument("--dt-seeds", type=int, default=8)
    ap.add_argument("--dts", type=float, nargs="+", default=[0.1, 0.05, 0.025])
    ap.add_argument(
        "--conn", default="event", help="delivery (bit-identical to 'index')"
    )
    ap.add_argument(
        "--limit", type=int, default=0, help="stop after this many new runs"
    )
    ap.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="dt: take the runs this forms file already has (same code, "
        "seeds and dt) instead of running them again",
    )
    args = ap.parse_args(argv)
    command = "python lab/coba_regimes.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )

    coba_cli.book(devices=1)   # the devices first, then BrainPy
    from provenance import provenance  # lab/provenance.py

    from shardbook import coba
    from shardbook.coba import regimes

    schema = design.FORMS_SCHEMA if args.what == "forms" else design.DT_SCHEMA
    jobs = plan_forms(args, regimes) if args.what == "forms" else plan_dt(args, regimes)
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    runs = old.get("runs", []) if old.get("schema") == schema else []
    if args.reuse is not None and args.what == "dt":
        have = {(r["form"], r["seed"], r["dt"]) for r in runs}
        wanted = {(j["form"], j["seed"], j["dt"]) for j in jobs}
        for r in json.loads(args.reuse.read_text())["runs"]:
            key = (r["form"], r["seed"], r["dt"])
            if key in wanted and key not in have:
                runs.append(dict(r, reused_from=str(args.reuse)))
    done = {(r["form"], r["seed"], r["dt"]) for r in runs}
    data = dict(
        schema=schema,
        provenance=provenance(command) | {"machine": machine()},
        protocol=regimes.PROTOCOL,
        conn=args.conn,
        runs=runs,
    )
    if args.what == "forms":
        data["forms"] = {
            k: dict(v, sizes=list(v["sizes"]), source=regimes.SOURCES[k])
            for k, v in regimes.FORMS.items()
        }
        data["seeds"] = dict(
            bounds=list(range(1, 1 + args.bound_seeds)),
            held_out=list(
                range(1 + args.bound_seeds, 1 + args.bound_seeds + args.held_out)
            ),
            cells=list(range(1, 1 + args.cell_seeds)),
        )
    data["isi_edges_ms"] = [float(x) for x in coba.ISI_EDGES_MS]
    new = 0
    t_all = time.time()
    for job in jobs:
        key = (job["form"], job["seed"], job["dt"])
        if key in done:
            continue
        t0 = time.time()
        kw = {k: v for k, v in job.items() if k not in ("form", "seed", "dt")}
        run = design.measure(job["seed"], dt=job["dt"], conn=args.conn, **kw)
        run = dict(form=job["form"], wall_s=round(time.time() - t0, 1), **run)
        data["runs"].append(run)
        done.add(key)
        coba_cli.write(args.out, data)
        st = run["stats"]
        print(
            f"[{args.what}] {job['form']:<22} seed {job['seed']:>2} dt {job['dt']}: "
            f"{st['rate']:.1f} Hz, CV {st['cv']:.2f}, Fano {st['fano']:.1f}, "
            f"short {st['short_isi']:.2f} ({run['wall_s']:.0f} s)",
            flush=True,
        )
        new += 1
        if args.limit and new >= args.limit:
            break
    data["wall_s_this_invocation"] = round(time.time() - t_all, 1)
    return coba_cli.save(args.out, data, f"[{args.what}] {len(data['runs'])} runs in "
                         f"{args.out} ({new} new, {time.time() - t_all:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
