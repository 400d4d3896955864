#!/usr/bin/env python
"""Brian 2 as the reference simulator of chapter 4: regimes and times beside the book's.

    python lab/coba_reference.py reference --out book/data/coba_reference.json
    python lab/coba_reference.py timing --out book/data/coba_brian2_timing.json

Brian 2 lives in a virtual environment of its own (``--venv``, default
``.venv-brian2``), made from ``lab/requirements-brian2.txt`` on first use; the reader's
install never sees it.  The Brian side is ``lab/brian2_coba.py`` (Brian 2's
``examples/COBAHH.py`` model, float64; cython, or cpp_standalone for ``timing``), run as
a child process.

``reference``: the Brette and NEST forms in Brian 2, ``--seeds`` seeds each with
Brian's own random graph and start ("own"), and ``--export-seeds`` seeds with the
book's graph and start exported from ``shardbook.coba`` ("book": the same synapses,
initial state and kick events as the book's run of that seed, so only the simulator
differs).  Each run's window (``regimes.PROTOCOL``) gives the statistics and the ISI
histogram with the book's own functions.

``timing``: Brian 2 and the book's network on one CPU core, side by side: the same
network (NEST's fixed in-degree of 64 + 16, the randomised start, exported from the
book to Brian: the same synapses, weights and initial state), at ``--sizes`` neurons,
for every delivery of ``--deliveries`` (default: ``index``, the book's default, and
``event``) and every Brian mode of ``--brian-modes`` (``BRIAN_MODES``: cython runtime
and cpp_standalone, one thread, each with the example's rate functions, ``exprel``, and
their form before 2019, ``exp``); ``--reps`` repetitions, interleaved (each Brian mode,
then each delivery, then again), ``--sim-ms`` of model time each, compile excluded on
both sides (Brian's cython cache is warmed by a first run; cpp_standalone's code
generation and ``make`` are timed apart, once per size, under ``warm``).  The spikes of
each timed window are recorded beside its time, and each row names its Brian mode and
rate functions.  The row named ``brian2`` is cython with exprel, as in the first
version of the file.  Brian 2's cython modes also run a fifth as long before each timed
run: the difference gives its cost per simulated second without the fixed cost of a
``run()`` call (code generation and checks; small at these lengths).  A cpp_standalone
row's ``seconds`` is Brian's own clock of the timed ``Network::run`` (OpenMP off, one
thread); ``process_seconds`` is the binary's whole wall time (start, loading the
arrays, a 10 ms warm-up, the run, writing the results).
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
sys.path.insert(0, str(ROOT / "lab"))   # its siblings, when imported
import coba_cli  # noqa: E402
import regime_runs as design  # noqa: E402  (lab/regime_runs.py)
from coba_cli import write  # noqa: E402
from coba_regimes import machine  # noqa: E402

BRIAN = ROOT / "lab" / "brian2_coba.py"
REQUIREMENTS = ROOT / "lab" / "requirements-brian2.txt"


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

        from shardbook.coba import we

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

    import jax

    from shardbook import coba
    from shardbook.coba import build, regimes

    data = _start(args, design.REFERENCE_SCHEMA)
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
                gates=list(coba.nest_initial_gates()),  # for start="kick"
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


# Brian 2's modes in ``timing``: who (the row's name), Brian's mode, the rate functions'
# form.  "brian2" keeps its name from the first version of the file (cython, exprel):
# the readers of book/data/coba_brian2_timing.json look it up by that name.
BRIAN_MODES = {
    "cython/exprel": ("brian2", "cython", "exprel"),
    "cython/exp": ("brian2/cython/exp", "cython", "exp"),
    "cpp_standalone/exprel": ("brian2/cpp_standalone", "cpp_standalone", "exprel"),
    "cpp_standalone/exp": ("brian2/cpp_standalone/exp", "cpp_standalone", "exp"),
}
# Brian 2's examples/COBAHH.py, whose model lab/brian2_coba.py runs
EXAMPLE = dict(
    file="examples/COBAHH.py",
    tag="2.9.0",
    commit="31f945d4e4f03ae5c9513f06efd596f8f97af500",
    rates="exprel",
    rates_note="the example writes alpha_m, beta_m and alpha_n with exprel since "
    "commit 28baceb8d2ab49e7ca1b3e4948a5c3008d92476c ('Use exprel in examples', "
    "2019-11-14; the same at tags 2.9.0 and 2.10.1); 'exp' is its form before that "
    "commit (x/(exp(x/k)-1), Brette et al. 2007), timed only to say what exprel costs",
)


class _Brian:
    """One Brian 2 child process (``serve`` or ``standalone``) answering ``run MS``."""

    def __init__(self, py, spec: dict, tmp: Path, key: str):
        who, mode, rates = BRIAN_MODES[key]
        self.who, self.mode, self.rates = who, mode, rates
        spec = dict(spec, rates=rates)
        cmd = "serve"
        if mode == "cpp_standalone":
            cmd = "standalone"
            spec["directory"] = str(tmp / f"standalone_{rates}")
        spec_file = tmp / f"spec_{key.replace('/', '_')}.json"
        spec_file.write_text(json.dumps(spec))
        self.proc = subprocess.Popen(
            [str(py), str(BRIAN), cmd, str(spec_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=brian_env(),
        )
        ready = self.proc.stdout.readline()
        if not ready.startswith("READY "):
            self.proc.kill()
            raise RuntimeError(f"Brian 2 ({key}): {ready!r}")
        self.info = json.loads(ready[6:])

    def run(self, ms: float) -> dict:
        self.proc.stdin.write(f"run {ms}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"Brian 2 ({self.who}) ended")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=120)


def timing(args, py) -> int:
    import jax

    from shardbook import book, coba
    data = _start(args, design.TIMING_SCHEMA, resume=False)
    data["simulator"] = dict(
        name="Brian 2",
        target="cython",  # of the rows named "brian2"; each row names its own
        dtype="float64",
        example=EXAMPLE,
        modes={
            BRIAN_MODES[k][0]: dict(mode=BRIAN_MODES[k][1], rates=BRIAN_MODES[k][2])
            for k in args.brian_modes
        },
        cpp_standalone=dict(
            openmp_threads=0,
            seconds="Brian's own clock of Network::run for the timed run "
            "(results/last_run_info.txt: std::clock without OpenMP); "
            "process_seconds: the whole binary (start, load, 10 ms warm-up, "
            "the run, write)",
            build="code generation and make timed apart (warm.<size>.brian), "
            "once per size and form, never in a row's seconds",
        ),
    )
    data.update(
        sizes=args.sizes,
        deliveries=args.deliveries,
        brian_modes=args.brian_modes,
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
    load_before = os.getloadavg()[0]  # the machine should be quiet: recorded
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
                duration_ms=args.sim_ms,
            )
            # one child per mode, started one after the other (a build is not timed
            # against another); all wait on their stdin while another one runs
            brians = []
            (tmp / str(neurons)).mkdir(exist_ok=True)
            for key in args.brian_modes:
                brians.append(_Brian(py, spec, tmp / str(neurons), key))
                print(f"[timing] {neurons} neurons: {key} ready, "
                      f"{json.dumps(brians[-1].info)}", flush=True)
            info = brians[0].info
            data["simulator"]["versions"] = dict(
                brian2=info["brian2"], numpy=info["numpy"]
            )
            warm = dict(
                book_compile_s={d: s for d, (_, s) in sims.items()},
                brian={
                    b.who: {k: v for k, v in b.info.items() if k != "directory"}
                    for b in brians
                },
            )
            if "brian2" in warm["brian"]:  # the first version's keys
                warm.update(brian_build_s=warm["brian"]["brian2"]["build_s"],
                            brian_first_run_s=warm["brian"]["brian2"]["warm_s"])
            data.setdefault("warm", {})[str(neurons)] = warm
            for rep in range(args.reps):
                for b in brians:
                    row = dict(neurons=neurons, who=b.who, rep=rep, mode=b.mode,
                               rates=b.rates, sim_ms=args.sim_ms)
                    if b.mode == "cpp_standalone":
                        got = b.run(args.sim_ms)
                        row.update(seconds=got["seconds"], spikes=got["spikes"],
                                   process_seconds=got["process_seconds"])
                    else:
                        # Brian pays a fixed cost per run() call (code objects,
                        # checks): a short run and a long one give the cost per
                        # simulated second apart
                        short = b.run(args.sim_ms / 5)
                        got = b.run(args.sim_ms)
                        row.update(seconds=got["seconds"], spikes=got["spikes"],
                                   short_seconds=short["seconds"],
                                   short_sim_ms=args.sim_ms / 5)
                    data["rows"].append(row)
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
            for b in brians:
                b.close()
    data["provenance"]["load_average_1min"] = dict(before=load_before,
                                                   after=os.getloadavg()[0])
    data["summary"] = summarize(data)
    write(args.out, data)
    for row in data["summary"]:
        print(f"[timing] {row}", flush=True)
    for line in speedups(data):
        print(f"[timing] {line}", flush=True)
    return 0


def speedups(data) -> list[str]:
    """One line per size and delivery: how many times as fast as each Brian 2 row
    (median seconds per simulated second), with the work (neurons, model time,
    spikes of one timed window), and what exprel costs in each Brian mode."""
    s = {(r["neurons"], r["who"]): r for r in data["summary"]}
    brians = [w for w in data["simulator"].get("modes", {"brian2": {}})]
    out = []
    for n in data["sizes"]:
        for d in data["deliveries"]:
            me = s[n, f"book/{d}"]
            spikes = me["spikes_per_step"] * data["sim_ms"] / 0.1
            fast = ", ".join(f"{s[n, w]['s_per_sim_s'] / me['s_per_sim_s']:.1f}x {w}"
                             for w in brians if (n, w) in s)
            out.append(f"{n:,} neurons, {data['sim_ms']:g} ms, {spikes:,.0f} spikes: "
                       f"book/{d} as fast as {fast}")
        for slow, quick in (("brian2", "brian2/cython/exp"),
                            ("brian2/cpp_standalone", "brian2/cpp_standalone/exp")):
            if (n, slow) in s and (n, quick) in s:
                cost = s[n, slow]["s_per_sim_s"] / s[n, quick]["s_per_sim_s"]
                out.append(f"{n:,} neurons: exprel costs {cost:.2f}x in {slow}")
    return out


def summarize(data) -> list[dict]:
    """Median seconds per simulated second per size and row name (``who``), and the
    ratio to each Brian 2 row: ``vs_brian2`` to "brian2" (cython, exprel: the first
    version's only Brian row), ``vs`` to every Brian 2 row by name."""
    import numpy as np  # noqa: F811

    out = []
    for neurons in data["sizes"]:
        rows = [r for r in data["rows"] if r["neurons"] == neurons]
        med, marginal_brian2 = {}, None
        mine_out = []
        for who in sorted({r["who"] for r in rows}):
            mine = [r for r in rows if r["who"] == who]
            med[who] = float(
                np.median([r["seconds"] / (r["sim_ms"] * 1e-3) for r in mine])
            )
            spikes = float(np.median([r["spikes"] for r in mine]))
            row = dict(
                neurons=neurons,
                who=who,
                s_per_sim_s=med[who],
                spikes_per_step=spikes / (mine[0]["sim_ms"] / 0.1),
                reps=len(mine),
            )
            for k in ("mode", "rates"):
                if k in mine[0]:
                    row[k] = mine[0][k]
            if "process_seconds" in mine[0]:
                row["process_s_per_sim_s"] = float(np.median(
                    [r["process_seconds"] / (r["sim_ms"] * 1e-3) for r in mine]))
            mine_out.append(row)
        for who in sorted(med):
            brian = [r for r in rows if r["who"] == who and "short_seconds" in r]
            if not brian:
                continue
            marginal = float(np.median([(r["seconds"] - r["short_seconds"])
                                        / ((r["sim_ms"] - r["short_sim_ms"]) * 1e-3)
                                        for r in brian]))
            mine_out.append(dict(neurons=neurons, who=f"{who} (per simulated s, "
                                 "without the fixed cost of a run() call)",
                                 s_per_sim_s=marginal, reps=len(brian)))
            if who == "brian2":
                marginal_brian2 = marginal
        brians = [w for w in med if w.startswith("brian2")]
        for row in mine_out:
            row["vs"] = {w: row["s_per_sim_s"] / med[w] for w in brians}
            if "brian2" in med:
                row["vs_brian2"] = row["s_per_sim_s"] / med["brian2"]
            if marginal_brian2 is not None:
                row["vs_brian2_marginal"] = row["s_per_sim_s"] / marginal_brian2
        out += mine_out
    return out


def _start(args, schema, resume=True) -> dict:
    from provenance import provenance  # lab/provenance.py

    command = "python lab/coba_reference.py " + " ".join(
        shlex.quote(a) for a in (args.argv if args.argv is not None else sys.argv[1:])
    )
    old = json.loads(args.out.read_text()) if resume and args.out.exists() else {}

    from shardbook.coba import regimes

    data = dict(
        schema=schema,
        provenance=provenance(command) | {"machine": machine()},
        protocol=regimes.PROTOCOL,
        runs=old.get("runs", []) if old.get("schema") == schema else [],
    )
    if schema == design.TIMING_SCHEMA:
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
    ap.add_argument(
        "--brian-modes",
        nargs="+",
        default=list(BRIAN_MODES),
        choices=sorted(BRIAN_MODES),
        help="Brian 2's modes and rate functions to time (mode/rates)",
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
