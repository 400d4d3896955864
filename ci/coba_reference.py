#!/usr/bin/env python
"""Brian 2 as the reference simulator of chapter 4: regimes and times beside the book's.

    python ci/coba_reference.py reference --out book/data/coba_reference.json
    python ci/coba_reference.py timing --out book/data/coba_brian2_timing.json

Brian 2 lives in a virtual environment of its own (``--venv``, default
``.venv-brian2``), made from ``ci/requirements-brian2.txt`` on first use; the reader's
install never sees it.  The Brian side is ``ci/brian2_coba.py`` (Brian 2's
``examples/COBAHH.py`` model, float64, cython), run as a child process.

``reference``: the Brette and NEST forms in Brian 2, ``--seeds`` seeds each with
Brian's own random graph and start ("own"), and ``--export-seeds`` seeds with the
book's graph and start exported from ``shardbook.coba`` ("book": the same synapses,
initial state and kick events as the book's run of that seed, so only the simulator
differs).  Each run's window (``regimes.PROTOCOL``) gives the statistics and the ISI
histogram with the book's own functions.

``timing``: Brian 2 (cython, its cache warmed by a first run) and the book's network
on one CPU device, side by side: the same network (NEST's fixed in-degree of 64 + 16,
the randomised start, exported from the book to Brian), at ``--sizes`` neurons, for
every delivery of ``--deliveries`` (default: ``index``, the book's default, and
``event``); ``--reps`` repetitions, interleaved (Brian, then each delivery, then again),
``--sim-ms`` of model time each, compile excluded on both sides.  The spikes of each
timed window are recorded beside its time.  Brian 2 also runs a fifth as long before
each timed run: the difference gives its cost per simulated second without the fixed
cost of a ``run()`` call (code generation and checks; small at these lengths).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))
import coba_cli  # noqa: E402
from coba_cli import write  # noqa: E402
from coba_regimes import machine  # noqa: E402

BRIAN = ROOT / "ci" / "brian2_coba.py"
REQUIREMENTS = ROOT / "ci" / "requirements-brian2.txt"


def ensure_venv(venv: Path) -> Path:
    """The Brian 2 venv's python, made from the requirements file if missing/stale."""
    py = venv / "bin" / "python"
    stamp = venv / ".requirements"
    want = REQUIREMENTS.read_text()
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    t0 = time.time()
    print(f"[brian2] making {venv} from {REQUIREMENTS.name}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
            str(REQUIREMENTS),
        ],
        check=True,
    )
    subprocess.run([str(py), "-c", "import brian2"], check=True)
    stamp.write_text(want)
    print(f"[brian2] ready in {time.time() - t0:.0f} s", flush=True)
    return py


def brian_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX", "XLA"))}
    env.pop("PYTHONPATH", None)
    return env


def export(net, path: Path, kick_steps: int = 600) -> None:
    """The book's graph and initial state of ``net`` (on one device) for Brian."""
    import jax
    import numpy as np

    arrays = {}
    for kind, names in (("exc", ("E2E", "E2I")), ("inh", ("I2E", "I2I"))):
        pre, post = [], []
        for name in names:
            proj = net.projections[name]
            src = np.asarray(proj.comm.conn.value)  # [k, n_post]
            offset = 0 if name.endswith("E") else net.n_exc
            n_pre = net.n_exc if kind == "exc" else net.n_inh
            k_idx, j = np.nonzero(src < n_pre)
            pre.append(src[k_idx, j])
            post.append(j + offset)
        arrays[f"{kind}_pre"] = np.concatenate(pre).astype(np.int32)
        arrays[f"{kind}_post"] = np.concatenate(post).astype(np.int32)
    pops = net.populations
    arrays["V"] = np.concatenate([np.asarray(p.V.value) for p in pops.values()])
    for g, proj in (("ge", ("E2E", "E2I")), ("gi", ("I2E", "I2I"))):
        arrays[g] = np.concatenate(
            [np.asarray(net.projections[x].refs["syn"].g.value) for x in proj]
        )
    for var in ("m", "h", "n"):
        arrays[var] = np.concatenate(
            [np.asarray(getattr(p, var).value) for p in pops.values()]
        )
    if net.start == "kick":
        from shardbook import book

        we = book.coba.we

        kick = jax.jit(net.kick)
        steps = np.stack([np.asarray(kick(i))[:50] for i in range(kick_steps)])
        counts = np.rint(steps / we).astype(int)
        s, neuron = np.nonzero(counts)
        arrays["kick_neuron"] = np.repeat(neuron, counts[s, neuron]).astype(np.int32)
        arrays["kick_step"] = np.repeat(s, counts[s, neuron]).astype(np.int32)
    np.savez(path, **arrays)


def run_brian(py, spec: dict, tmp: Path) -> tuple:
    import numpy as np

    spec_file, out = tmp / "spec.json", tmp / "spikes.npz"
    spec_file.write_text(json.dumps(spec))
    p = subprocess.run(
        [str(py), str(BRIAN), "run", str(spec_file), str(out)],
        capture_output=True,
        text=True,
        env=brian_env(),
        timeout=3600,
    )
    if p.returncode:
        raise RuntimeError(f"Brian 2 failed ({p.returncode}):\n{p.stderr[-3000:]}")
    info = json.loads(p.stdout.strip().splitlines()[-1])
    got = np.load(out)
    steps = int(round(spec["duration_ms"] / spec.get("dt", 0.1)))
    raster = np.zeros((steps, int(got["neurons"])), bool)
    keep = got["step"] < steps
    raster[got["step"][keep], got["neuron"][keep]] = True
    return info, raster


def reference(args, py) -> int:
    from shardbook import book

    build, regimes = book.coba.build, book.coba.regimes
    import jax

    data = _start(args, regimes.REFERENCE_SCHEMA)
    data["simulator"] = dict(
        name="Brian 2",
        model="examples/COBAHH.py (tags 2.9.0, 2.10.1)",
        target="cython",
        dtype="float64",
        method="exponential_euler",
        threshold="v > -20 mV",
        refractory_ms=3.0,
    )
    data["isi_edges_ms"] = [
        float(x)
        for x in __import__(
            "shardbook.coba.run", fromlist=["ISI_EDGES_MS"]
        ).ISI_EDGES_MS
    ]
    done = {(r["form"], r["connectivity"], r["seed"]) for r in data["runs"]}
    total_ms = regimes.PROTOCOL["transient_ms"] + regimes.PROTOCOL["window_ms"]
    jobs = [
        (form, "own", s)
        for form in ("brette", "nest")
        for s in range(1, 1 + args.seeds)
    ]
    jobs += [
        (form, "book", s)
        for form in ("brette", "nest")
        for s in range(1, 1 + args.export_seeds)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for form, conn, seed in jobs:
            if (form, conn, seed) in done:
                continue
            kw = regimes.FORMS[form]
            spec = dict(
                n_exc=kw["sizes"][0],
                n_inh=kw["sizes"][1],
                seed=seed,
                dt=0.1,
                duration_ms=total_ms,
                graph=kw["graph"],
                start=kw["start"],
                gates=list(book.coba.nest_initial_gates()),  # for start="kick"
            )
            if conn == "book":
                net = build(jax.devices()[:1], seed=seed, conn="index", **kw)
                export(net, tmp / "export.npz")
                spec.update(graph="file", start="file", export=str(tmp / "export.npz"))
            t0 = time.time()
            info, raster = run_brian(py, spec, tmp)
            run = dict(
                form=form,
                connectivity=conn,
                seed=seed,
                dt=0.1,
                neurons=raster.shape[1],
                brian_run_s=round(info["run_s"], 2),
                **regimes.window_stats(raster, 0.1),
            )
            data["simulator"]["versions"] = dict(
                brian2=info["brian2"], numpy=info["numpy"]
            )
            data["runs"].append(run)
            write(args.out, data)
            st = run["stats"]
            print(
                f"[reference] {form} ({conn}) seed {seed}: {st['rate']:.1f} Hz, "
                f"CV {st['cv']:.2f}, Fano {st['fano']:.1f}, "
                f"short {st['short_isi']:.2f} "
                f"({time.time() - t0:.0f} s)",
                flush=True,
            )
    return 0


def timing(args, py) -> int:
    import jax

    from shardbook import book

    regimes = book.coba.regimes

    coba = book.coba
    data = _start(args, regimes.TIMING_SCHEMA, resume=False)
    data["simulator"] = dict(name="Brian 2", target="cython", dtype="float64")
    data.update(
        sizes=args.sizes,
        deliveries=args.deliveries,
        reps=args.reps,
        sim_ms=args.sim_ms,
        network=dict(graph="fixed", start="random", k=[64, 16], seed=1),
        rows=[],
    )
    dev = (
        book.speed_devices()[:1]
        if hasattr(book, "speed_devices")
        else jax.devices()[:1]
    )
    steps = int(round(args.sim_ms / coba.DT))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for neurons in args.sizes:
            sizes = (neurons * 4 // 5, neurons // 5)
            kw = dict(sizes=sizes, graph="fixed", start="random", seed=1)
            export(coba.build(dev, conn="index", **kw), tmp / "export.npz")
            sims = {}
            for d in args.deliveries:
                net = coba.build(dev, conn=d, **kw)
                sim = coba.Simulation(net, record=("count",))
                t0 = time.perf_counter()
                sim.compile(steps)
                sims[d] = (sim, time.perf_counter() - t0)
            spec = dict(
                n_exc=sizes[0],
                n_inh=sizes[1],
                seed=1,
                dt=0.1,
                graph="file",
                start="file",
                export=str(tmp / "export.npz"),
                record=False,
            )
            (tmp / "spec.json").write_text(json.dumps(spec))
            server = subprocess.Popen(
                [str(py), str(BRIAN), "serve", str(tmp / "spec.json")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=brian_env(),
            )
            ready = server.stdout.readline()
            if not ready.startswith("READY "):
                raise RuntimeError(f"Brian 2 server: {ready!r}")
            info = json.loads(ready[6:])
            data["simulator"]["versions"] = dict(
                brian2=info["brian2"], numpy=info["numpy"]
            )
            data.setdefault("warm", {})[str(neurons)] = dict(
                brian_build_s=info["build_s"],
                brian_first_run_s=info["warm_s"],
                book_compile_s={d: s for d, (_, s) in sims.items()},
            )
            for rep in range(args.reps):
                # Brian pays a fixed cost per run() call (code objects, checks): a
                # short run and a long one give the cost per simulated second apart
                short = {}
                for ms in (args.sim_ms / 5, args.sim_ms):
                    server.stdin.write(f"run {ms}\n")
                    server.stdin.flush()
                    short[ms] = json.loads(server.stdout.readline())
                got = short[args.sim_ms]
                data["rows"].append(
                    dict(neurons=neurons, who="brian2", rep=rep, seconds=got["seconds"],
                         sim_ms=args.sim_ms, spikes=got["spikes"],
                         short_seconds=short[args.sim_ms / 5]["seconds"],
                         short_sim_ms=args.sim_ms / 5))
                for d, (sim, _) in sims.items():
                    before = sum(sim.totals().values())
                    _, seconds = sim.timed_run(steps)
                    spikes = sum(sim.totals().values()) - before
                    data["rows"].append(
                        dict(
                            neurons=neurons,
                            who=f"book/{d}",
                            rep=rep,
                            seconds=seconds,
                            sim_ms=args.sim_ms,
                            spikes=spikes,
                        )
                    )
                write(args.out, data)
                line = ", ".join(
                    f"{r['who']} {r['seconds']:.2f} s ({r['spikes']} spikes)"
                    for r in data["rows"]
                    if r["neurons"] == neurons and r["rep"] == rep
                )
                print(f"[timing] {neurons} neurons, rep {rep}: {line}", flush=True)
            server.stdin.write("quit\n")
            server.stdin.flush()
            server.wait(timeout=60)
    data["summary"] = summarize(data)
    write(args.out, data)
    for row in data["summary"]:
        print(f"[timing] {row}", flush=True)
    return 0


def summarize(data) -> list[dict]:
    """Median seconds per simulated second, and the ratio to Brian 2, per size."""
    import numpy as np  # noqa: F811

    out = []
    for neurons in data["sizes"]:
        rows = [r for r in data["rows"] if r["neurons"] == neurons]
        med = {}
        for who in sorted({r["who"] for r in rows}):
            mine = [r for r in rows if r["who"] == who]
            med[who] = float(
                np.median([r["seconds"] / (r["sim_ms"] * 1e-3) for r in mine])
            )
            spikes = float(np.median([r["spikes"] for r in mine]))
            out.append(
                dict(
                    neurons=neurons,
                    who=who,
                    s_per_sim_s=med[who],
                    spikes_per_step=spikes / (mine[0]["sim_ms"] / 0.1),
                    reps=len(mine),
                )
            )
        brian = [r for r in rows if r["who"] == "brian2"]
        marginal = float(np.median([(r["seconds"] - r["short_seconds"])
                                    / ((r["sim_ms"] - r["short_sim_ms"]) * 1e-3)
                                    for r in brian]))
        out.append(dict(neurons=neurons, who="brian2 (per simulated s, without the "
                        "fixed cost of a run() call)", s_per_sim_s=marginal,
                        reps=len(brian)))
        for row in out:
            if row["neurons"] == neurons:
                row["vs_brian2"] = row["s_per_sim_s"] / med["brian2"]
                row["vs_brian2_marginal"] = row["s_per_sim_s"] / marginal
    return out


def _start(args, schema, resume=True) -> dict:
    from shardbook import book

    provenance = book.provenance.provenance

    command = "python ci/coba_reference.py " + " ".join(
        shlex.quote(a) for a in (args.argv if args.argv is not None else sys.argv[1:])
    )
    old = json.loads(args.out.read_text()) if resume and args.out.exists() else {}
    from shardbook import book

    regimes = book.coba.regimes

    data = dict(
        schema=schema,
        provenance=provenance(command) | {"machine": machine()},
        protocol=regimes.PROTOCOL,
        runs=old.get("runs", []) if old.get("schema") == schema else [],
    )
    if schema == regimes.TIMING_SCHEMA:
        data.pop("runs")
    return data


def main(argv=None) -> int:
    ap = coba_cli.parser(__doc__, "reference", "timing")
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv-brian2")
    ap.add_argument("--seeds", type=int, default=16, help="Brian's own graph: seeds")
    ap.add_argument(
        "--export-seeds", type=int, default=8, help="the book's graph: seeds"
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[4000, 16000])
    ap.add_argument(
        "--deliveries",
        nargs="+",
        default=["index", "event"],
        help="the book's deliveries to time (conn= of coba.build)",
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sim-ms", type=float, default=500.0)
    args = ap.parse_args(argv)
    args.argv = argv
    coba_cli.book(devices=1)
    py = ensure_venv(args.venv)
    return reference(args, py) if args.what == "reference" else timing(args, py)


if __name__ == "__main__":
    sys.exit(main())
