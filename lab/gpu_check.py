#!/usr/bin/env python3
"""The book's GPU check: one command that tests its GPU claims on a real GPU.

    lab/gpu_check                     on a machine with an NVIDIA GPU (at most 8
                                      minutes: --budget, default 480 s; the stored
                                      H200 run had 470): writes
                                      book/data/gpu_<device>.json
    lab/gpu_check --dry-run [--out D] the same code path on the CPU with tiny sizes; the
                                      file goes to D (default: a new temporary folder)
    lab/gpu_check --predict           the GPU-target prediction, compiled here without a
                                      GPU: book/data/gpu_target_h200.json
    lab/gpu_check --wheels DIR        download the wheels the device lacks (BrainPy's
                                      family, nbval and Jupyter's kernel) for Python
                                      3.12 into DIR, with DIR/COMMIT (HEAD's hash)

Phases (``--phases``, all by default).  The first three run in two child processes
(``GROUPS``: compile and memory in one, timing in the other), each with its own time
budget (``--budget`` in all, shared out by ``SHARES``), so that one hang costs only its
child's phases:

1. ``compile``: the steps chapter 6 compiles for a 1-device H200 target, compiled again
   on the device; collectives, argument, output and temporary bytes beside the
   prediction.  Differences are reported, not hidden: XLA autotunes only with a device.
2. ``memory``: ``memory_analysis()`` against the device's ``memory_stats()`` peak, for
   the RNN training step and the COBA-HH loop at three sizes each, run in ascending
   order of their predicted bytes (the peak is a high-water mark: a row whose peak did
   not rise is marked ``masked``).
3. ``timing``: COBA-HH with the push delivery and the index matrix, side by side and
   interleaved (``coba.timing.time_steps``), at 4,200, 120,000 and 1,000,000 neurons and
   larger while the budget lasts (``--neurons`` names the sizes), events per step
   beside every time, compile time apart; 10 s of simulated time at 120,000 neurons
   beside BrainPy's published 42-56 s; the RNN training step of chapters 2 and 3.  The
   file's ``crossover`` sets each size's push and index times beside an earlier GPU
   run's (``--beside``, by default the book's H200 run, book/data/gpu_h200.json).
4. ``notebooks``: every page under lax nbval (``pytest --nbval-lax``), each in a fresh
   kernel with its own timeout, while the budget lasts: the quick start and the four
   core chapters first, then every other notebook of ``_toc.yml``
   (``lab/gpu_notebooks.py``; ``--notebooks`` names others).  One row per page: ok,
   failed, timeout or skipped, wall time, the first error, and the device, JAX, date
   and commit it ran with.  The record page (``ci/record.py``) shows them.

The file records the device, driver, versions (and how they differ from the book's
pins), commit, date and command beside every figure; ``lab/gpu_schema.validate``
checks it before it is written.

On a GPU machine with no package index (ours: Python 3.12, JAX 0.11.2, CUDA 13):
here, ``lab/gpu_check --wheels .whl`` (about 23 MiB; ``.whl/`` is ignored by git), then
with ``.whl`` carried run::

    site=$(mktemp -d) && python3 -m pip install -q --no-index --no-deps \
        --no-compile --target "$site" .whl/*.whl && PYTHONPATH="$site:$PWD" \
        lab/gpu_check --commit "$(cat .whl/COMMIT)" --phases timing,notebooks \
        --suffix pages --budget 360 --neurons 4200 120000 1000000 --out $OUT

and commit the ``gpu_<device>_pages.json`` that comes back into ``book/data/``, beside
the full run's ``gpu_<device>.json`` that the chapters read (all phases: leave out
``--phases`` and ``--suffix``).  That JAX is
not the book's pin (0.10.2, CUDA 12): the file records the mismatch.  JAX 0.11 is not
on the package index this book is built from, so the dry run checks the same code with
the pinned JAX 0.10.2 only; a step that the device's JAX breaks costs only its own
row (``errors`` in the file), a page that it breaks only its own row.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "ci"))

import gpu_notebooks  # noqa: E402  (the pages under lax nbval; no JAX either)
import gpu_schema  # noqa: E402  (lab/gpu_schema.py: the data files' structure)
import record  # noqa: E402  (ci/record.py: the crossover's lines, as the record's)
from provenance import (  # noqa: E402  (lab/provenance.py)
    gpu_driver,
    provenance as measured_provenance,  # noqa: E402
    version,
)

# book and the helpers that import neither JAX nor BrainPy
from shardbook import book, child, gpudata, gputarget, hardware, memory  # noqa: E402

SCRIPT = Path(__file__).resolve()
BUDGET_S = 480                    # 8 minutes on one H200, everything included
BUILDERS = "shardbook.gputarget_steps:"   # chapter 6's step builders
SHARES = {"compile": 0.22, "memory": 0.16, "timing": 0.40, "notebooks": 0.22}
PUBLISHED_10S = (42.1, 56.0)      # BrainPy ICLR 2024 reproducibility data, one GPU
PUBLISHED_SOURCE = ("BrainPy ICLR 2024 reproducibility data, 5.1_EI_balanced_network/"
                    "speed_result_HH/brainpy-gpu.json: COBA-HH, 10 s simulated, one "
                    "GPU, 42.1-56.0 s from 4,000 to 120,000 neurons (connection "
                    "probability 2 %: 80 inputs at 4,000 neurons, 2,400 at 120,000)")
# The wheels the device lacks (its KINDS.md lists JAX, numpy, numba, optax, msgpack,
# scipy, matplotlib, tqdm, opt-einsum, typing-extensions): BrainPy 2.8.2's family and
# saiunit's array_api_compat, at requirements.txt's versions; about 7 MB, all
# pure-Python (py3-none-any), well inside the 64 MiB that travels.
WHEELS = ("brainpy", "brainpy_state", "brainstate", "brainevent", "brainunit",
          "braintools", "saiunit", "array_api_compat")
# ... and what runs the pages under lax nbval there, at requirements.txt's versions:
# nbval and the pytest it runs under (the device's own pytest plugins are not loaded:
# PYTEST_DISABLE_PLUGIN_AUTOLOAD), nbformat, jupyter_client, ipykernel and IPython, and
# every package they need that the device lacks (read off their metadata for Python
# 3.12 on Linux), and ipywidgets (chapter 1's explorer).  pyzmq, tornado, wcwidth and
# rpds-py hold compiled code: their cp312 or abi3 manylinux wheels.  About 23 MiB in
# all with the BrainPy family, checked by a Python 3.12 rehearsal on a CPU with only
# the device's packages besides.
NB_WHEELS = ("nbval", "pytest", "pluggy", "iniconfig", "nbformat", "fastjsonschema",
             "jsonschema", "jsonschema-specifications", "referencing", "rpds-py",
             "jupyter_client", "jupyter_core", "traitlets", "platformdirs", "pyzmq",
             "tornado", "ipykernel", "comm", "debugpy", "matplotlib-inline",
             "nest-asyncio2", "ipython", "ipython_pygments_lexers", "jedi", "parso",
             "prompt_toolkit", "wcwidth", "pexpect", "ptyprocess", "stack-data",
             "asttokens", "executing", "pure_eval", "ipywidgets",
             "widgetsnbextension", "jupyterlab_widgets")
WHEELS_MAX_MIB = 40               # with the tree (about 5 MB), under the 64 MiB carried
VERSIONS = ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt",
            "jax-cuda12-plugin", "brainpy", "brainpy_state", "brainstate",
            "brainevent", "brainunit", "braintools", "numpy", "numba", "optax",
            "orbax-checkpoint", "scikit-learn", "matplotlib", "nbval", "pytest",
            "ipykernel", "jupyter_client", "ipython")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


# ------------------------------------------------------------------- what is measured
def sizes(dry: bool) -> dict:
    """Every size the check uses; ``dry``: tiny ones, for the CPU."""
    if dry:   # one of each kind of step: a BrainPy RNN, plain JAX, COBA-HH at size
        tiny = dict(B=4, T=4, I=4, H=8, O=2)
        return dict(
            compile={"dp": ("rnn_data_parallel", dict(tiny)),
                     "fsdp": ("fsdp_mlp", dict(B=8, D=16, layers=2)),
                     "coba_1_gpu": ("coba_hh", dict(neurons=8400, steps=10))},
            memory_rnn=[dict(tiny)], memory_coba=[0.2], memory_steps=10,
            timing_neurons=[840], timing_steps=20, warmup=20, repeats=2,
            ten_s=dict(neurons=840, chunk=20, chunks=2),
            rnn=[("ch2", dict(tiny))], rnn_repeats=2)
    return dict(
        compile=None,           # the prediction file's jobs, exactly
        memory_rnn=[dict(B=840, T=50, I=4, H=h, O=2) for h in (32, 1024, 4096)],
        memory_coba=[1, 24, 240], memory_steps=100,
        timing_neurons=[4200, 120_000, 1_000_000, 4_000_000, 16_000_000],
        timing_steps=500, warmup=1000, repeats=3,
        ten_s=dict(neurons=120_000, chunk=10_000, chunks=10),
        rnn=[("ch2", None), ("ch3", None)], rnn_repeats=5)


def prediction_jobs() -> dict:
    """Chapter 6's steps for one H200: its sizes for one device, and the largest COBA-HH
    that chapter 4's ledger says fits in the book's budget of one H200
    (``hardware.budget_bytes``, chapter 6's ``N1``)."""
    from shardbook import coba
    n1 = memory.largest_fitting(lambda n: coba.fit_bytes_per_device(n, 1),
                                     hardware.budget_bytes("h200"), step=4200)
    return {"dp": ("rnn_data_parallel", {}), "hidden": ("rnn_hidden", {}),
            "hidden_2d": ("rnn_hidden", {"two_d": True}), "fsdp": ("fsdp_mlp", {}),
            "coba": ("coba_hh", {}), "coba_1_gpu": ("coba_hh", {"neurons": n1})}


def summary(prog) -> dict:
    """What the comparison reads of a compiled program."""
    mem = prog.memory or {}
    out = {k: int(mem.get(k, 0)) for k in ("arguments", "outputs", "aliased",
                                            "temporaries", "total")}
    out["collectives"] = len(prog.collectives)
    out["ops"] = dict(prog.counts())
    out["compile_s"] = prog.meta.get("compile_s")
    return out


# ------------------------------------------------------------------------ provenance
def git(*args) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=20)
        return done.stdout.strip() if done.returncode == 0 else None
    except Exception:
        return None


def pins() -> dict:
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, ver = line.split(";")[0].strip().split("==")
            out[name.lower().replace("_", "-")] = ver.strip()
    return out


def provenance(command: str, commit: str | None) -> dict:
    """Device, driver, versions and their mismatch with the book's pins (needs JAX)."""
    import platform as _platform

    import jax

    dev = jax.devices()[0]
    versions = {p: version(p) for p in VERSIONS}
    versions["python"] = _platform.python_version()
    pinned = pins()
    mismatch = {p: {"pinned": pinned[p.lower().replace("_", "-")], "found": v}
                for p, v in versions.items()
                if p.lower().replace("_", "-") in pinned
                and v != pinned[p.lower().replace("_", "-")]}
    dirty = git("status", "--porcelain")
    return dict(device_kind=dev.device_kind, device_count=len(jax.devices()),
                platform=dev.platform, driver=gpu_driver(),
                versions=versions, pins={p: pinned.get(p.lower().replace("_", "-"))
                                         for p in versions},
                mismatch=mismatch, commit=commit or git("rev-parse", "HEAD"),
                dirty=None if dirty is None else bool(dirty),
                status=None if dirty is None else dirty[:2000],   # what was not clean
                date=measured_provenance(command)["date"], command=command,
                python=sys.version.split()[0])


# ------------------------------------------------------------------------ the phases
def _mem_row(model, size, compiled, run, ledger=None) -> dict:
    """Run ``run()`` once; the device's peak beside ``memory_analysis()``."""
    import jax

    analysis = memory.compiled_memory(compiled)
    dev = jax.devices()[0]
    before = dev.memory_stats() or {}
    high = before.get("peak_bytes_in_use", 0)
    run()
    after = dev.memory_stats() or {}
    peak = after.get("peak_bytes_in_use")
    in_use = before.get("bytes_in_use")
    measured = None if peak is None else peak - in_use + analysis["arguments"]
    # bytes_limit: the allocator's real cap, against which the book's budget
    # (hardware.budget_bytes, from XLA's spec) is checked once a GPU has run this
    return dict(model=model, size=size, analysis=analysis, ledger=ledger,
                bytes_in_use_before=in_use, peak_bytes_in_use=peak,
                bytes_limit=after.get("bytes_limit"),
                measured=measured, masked=None if peak is None else peak <= high,
                ratio=None if not measured else measured / analysis["total"])


def attempt(errors: list, what: str, fn):
    """``fn()``, or None with the error kept in ``errors``: one failing step (a JAX
    that BrainPy does not know, an overflow at one size) costs only its own row."""
    try:
        return fn()
    except Exception as e:
        errors.append(dict(what=what, error=f"{type(e).__name__}: {e}"[:600]))
        print(f"[error] {what}: {errors[-1]['error']}", file=sys.stderr, flush=True)
        return None


def phase_compile(cfg: dict) -> dict:
    """Compile chapter 6's 1-device steps here, beside the prediction."""
    pred, progs = cfg["prediction"], {}
    if pred is None:    # the dry run: its own CPU compiles, written as a prediction
        jobs = sizes(True)["compile"]
        progs = dict(zip(jobs, compile_here(jobs)))
        pred = prediction(jobs, list(progs.values()), "1 x CPU (dry run: this process)")
    gpu_schema.validate_prediction(pred)
    rows, errors = [], []
    for name, job in pred["jobs"].items():
        prog = progs.get(name) or attempt(
            errors, f"compile {name}",
            lambda job=job: compile_here({"": (job["builder"], job["kwargs"])})[0])
        if prog is None:
            continue
        got, want = summary(prog), job
        diff = {k: got[k] - want["memory"][k]
                for k in ("arguments", "outputs", "temporaries", "total")}
        diff["collectives"] = got["collectives"] - want["collectives"]
        rows.append(dict(name=name, builder=job["builder"], kwargs=job["kwargs"],
                         predicted=dict(want["memory"],
                                        collectives=want["collectives"]),
                         measured={k: v for k, v in got.items() if k != "ops"},
                         ops=got["ops"], diff=diff,
                         exact=diff["arguments"] == 0 and diff["outputs"] == 0))
        print(f"[compile] {name}: collectives {got['collectives']} "
              f"(predicted {want['collectives']}), "
              f"temporaries {got['temporaries']:,} B "
              f"(predicted {want['memory']['temporaries']:,})", flush=True)
    return dict(rows=rows, predicted_on=pred["provenance"], errors=errors)


def phase_memory(cfg: dict) -> dict:
    import jax

    import brainpy.math as bm

    s = sizes(cfg["dry"])
    dev = jax.devices()[0]
    from shardbook import coba, rnn
    todo, errors = [], []

    def rnn_item(sz):
        with bm.sharding.device_mesh([dev], ["batch"]):
            model = rnn.RNN(sz["I"], sz["H"], sz["O"], sz["B"])
        step = rnn.make_train_step(model)
        xs, ys = rnn.make_task(sz["B"], sz["T"], sz["I"], sz["O"])
        compiled = step.lower(xs, ys).compile()
        return ("rnn.train_step", sz, compiled,
                lambda: jax.block_until_ready(step(xs, ys)), None)

    def coba_item(scale):
        net = coba.build([dev], scale=scale, conn="index")
        sim = coba.Simulation(net, record=("count",))
        steps = s["memory_steps"]
        compiled = sim.compile(steps)
        n = sum(coba.sizes(scale))
        return ("coba.loop", dict(neurons=n, steps=steps, conn="index"), compiled,
                lambda: sim.run(steps), float(coba.fit_bytes_per_device(n, 1)))

    for sz in s["memory_rnn"]:
        todo.append(attempt(errors, f"memory rnn {sz}", lambda sz=sz: rnn_item(sz)))
    for scale in s["memory_coba"]:
        todo.append(attempt(errors, f"memory coba scale {scale}",
                            lambda sc=scale: coba_item(sc)))
    todo = [t for t in todo if t is not None]
    todo.sort(key=lambda t: memory.compiled_memory(t[2])["total"])
    rows = []
    for model, size, compiled, run, ledger in todo:
        row = attempt(errors, f"memory {model} {size}",
                      lambda: _mem_row(model, size, compiled, run, ledger))
        if row is None:
            continue
        rows.append(row)
        r = rows[-1]
        print(f"[memory] {model} {size}: analysis {r['analysis']['total']:,} B, "
              f"peak {r['peak_bytes_in_use']}", flush=True)
    return dict(rows=rows, errors=errors)


def _median(xs):
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def phase_timing(cfg: dict) -> dict:
    import jax
    import numpy as np

    import brainpy.math as bm

    s, deadline = sizes(cfg["dry"]), time.monotonic() + cfg["budget_s"]
    dev = jax.devices()[0]
    from shardbook import coba, rnn

    out = {"coba": [], "coba_10s": None, "rnn": [], "skipped": [], "errors": []}

    def split(n):
        e = round(0.8 * n)
        return (e, n - e)

    def rnn_timing(chapter, given):
        c = given or book.config(chapter, 1).asdict()
        axis = "batch" if chapter == "ch2" else "hidden"
        with bm.sharding.device_mesh([dev], [axis]):
            model = rnn.RNN(c["I"], c["H"], c["O"], c["B"])
        step = rnn.make_train_step(model, lr=c.get("lr", 1e-3))
        xs, ys = rnn.make_task(c["B"], c["T"], c["I"], c["O"])
        t0 = time.perf_counter()
        jax.block_until_ready(step(xs, ys))        # compile and one step
        first = time.perf_counter() - t0
        samples = coba.timing.interleave(
            {"step": lambda: jax.block_until_ready(step(xs, ys))},
            repeats=s["rnn_repeats"])["step"]
        med = _median(samples)
        out["rnn"].append(dict(chapter=chapter, sizes={k: c[k] for k in "BTIHO"},
                               seconds_per_step=med, samples=samples,
                               compile_s=first - med,
                               sequences_per_step=c["B"], time_steps=c["T"]))
        print(f"[timing] RNN {chapter}: {med * 1e3:.3f} ms wall per training step",
              flush=True)

    def ten_seconds(ten):
        # 10 s of simulated time at 120,000 neurons (the push delivery), vs BrainPy's
        left = deadline - time.monotonic()
        net = coba.build([dev], sizes=split(ten["neurons"]), conn="push")
        sim = coba.Simulation(net, record=("count",))
        degrees = coba.timing.out_degrees(net)
        compile_s = time.perf_counter()
        sim.compile(ten["chunk"])
        compile_s = time.perf_counter() - compile_s
        run_s, chunks = 0.0, 0
        for _ in range(ten["chunks"]):
            _, dt = sim.timed_run(ten["chunk"])
            run_s, chunks = run_s + dt, chunks + 1
            if time.monotonic() + 2 * dt > deadline - 0.5 * cfg["budget_s"]:
                break       # keep half the budget for the sizes below
        counts = {p: np.asarray(c.value, np.int64) for p, c in sim.counts.items()}
        steps = chunks * ten["chunk"]
        events = sum(float(counts[p] @ degrees[p]) for p in counts) / steps
        simulated_s = steps * coba.DT * 1e-3
        spikes = sum(int(v.sum()) for v in counts.values())
        out["coba_10s"] = dict(
            neurons=ten["neurons"], conn="push", simulated_s=simulated_s, run_s=run_s,
            compile_s=compile_s, events_per_step=events,
            rate_hz=spikes / ten["neurons"] / simulated_s,
            s_per_sim_s=run_s / simulated_s, complete=chunks == ten["chunks"],
            budget_left_s=left, published_s=list(PUBLISHED_10S),
            published_source=PUBLISHED_SOURCE)
        del net, sim
        print(f"[timing] {ten['neurons']:,} neurons, {simulated_s:g} s simulated: "
              f"{run_s:.1f} s wall (compile {compile_s:.1f} s)", flush=True)

    # the RNN training step of chapters 2 and 3, one device
    for chapter, given in s["rnn"]:
        attempt(out["errors"], f"timing rnn {chapter}",
                lambda ch=chapter, g=given: rnn_timing(ch, g))
    progress("timing", out)
    attempt(out["errors"], "timing 10 s", lambda: ten_seconds(s["ten_s"]))
    progress("timing", out)

    # push vs index, side by side, growing while the budget lasts.  The first two
    # sizes always run (4,200 is the book's network, 120,000 BrainPy's published size);
    # a larger one runs if its guess fits what is left: a line through the last two
    # sizes' wall times (a single size scales all but its compiles with the network,
    # which overstates a small network's share of fixed costs many times over)
    done = []        # (neurons, seconds, compile seconds) of each size run
    for i, n in enumerate(cfg.get("neurons") or s["timing_neurons"]):
        left = deadline - time.monotonic()
        guess = None
        if len(done) >= 2:
            (n0, t0_, _), (n1, t1, _) = done[-2:]
            guess = t1 + (t1 - t0_) / (n1 - n0) * (n - n1)
        elif i >= 2:
            if not done:
                out["skipped"].append(dict(neurons=n, why="no smaller size finished"))
                continue
            n1, t1, c1 = done[-1]
            guess = c1 + (t1 - c1) * n / n1
        if guess is not None and guess > left - 10:
            out["skipped"].append(dict(neurons=n, why=f"budget: {left:.0f} s left, "
                                                      f"about {guess:.0f} s needed"))
            continue
        t0 = time.perf_counter()
        try:
            res = coba.timing.time_steps(
                {"push": dict(conn="push"), "index": dict(conn="index")},
                steps=s["timing_steps"], warmup=s["warmup"], repeats=s["repeats"],
                devices=[dev], sizes=split(n))
        except Exception as e:   # e.g. a delivery overflow at this size: say so
            out["errors"].append(dict(what=f"timing {n:,} neurons",
                                      error=f"{type(e).__name__}: {e}"[:600]))
            continue
        for name, t in res.items():
            row = t.asdict()
            row.update(neurons=n, conn=name, compile_s=t.extra["compile_s"],
                       rate_hz=t.extra["rate_hz"])
            out["coba"].append(row)
            print(f"[timing] {n:,} neurons {t.line()}", flush=True)
        fixed = sum(t.extra.get("compile_s", 0.0) for t in res.values())
        done.append((n, time.perf_counter() - t0, fixed))
        progress("timing", out)
    return out


PHASE_FUNCTIONS = {"compile": phase_compile, "memory": phase_memory,
                   "timing": phase_timing,
                   "provenance": lambda cfg: None}   # a child for the provenance alone


_ANSWER: dict = {}


def progress(phase: str, result) -> None:
    """Answer what ``phase`` has so far: if the child is stopped at its timeout, the
    parent keeps it (the last answer line wins), marked as cut short."""
    _ANSWER["phases"][phase] = dict(result=result, record=dict(partial=True))
    child.answer(_ANSWER)


def child_main(phases: str) -> int:
    """A child: run ``phases`` (comma-separated) in turn, each caught apart; answer with
    each one's result and record, and the provenance of this process."""
    cfg = json.loads(sys.stdin.read())
    names = phases.split(",")
    _ANSWER.update(phases={})
    _ANSWER["provenance"] = provenance(cfg["command"], cfg["commit"])
    for name in names:
        t0 = time.monotonic()
        record = dict(budget_s=round(cfg["budgets"][name], 1), status="ok")
        result = None
        try:
            result = PHASE_FUNCTIONS[name](dict(cfg, budget_s=cfg["budgets"][name]))
        except Exception:
            record.update(status="error", error=traceback.format_exc()[-2000:])
            print(record["error"], file=sys.stderr, flush=True)
        record["wall_s"] = round(time.monotonic() - t0, 2)
        _ANSWER["phases"][name] = dict(result=result, record=record)
        child.answer(_ANSWER)
    return 0


# ------------------------------------------------------------------------ the parent
def run_child(phases: tuple, cfg: dict, budgets: dict, dry: bool) -> tuple[dict, dict]:
    """Run ``phases`` in one child, its timeout their budgets together:
    ``({phase: result}, {phase: record})``; a phase the child never answered for gets
    the child's error."""
    extra = dict(JAX_PLATFORMS="cpu") if dry else {}
    env = child.clean_env(extra, keep=("XLA_PYTHON_CLIENT_*",))
    timeout = sum(budgets[p] for p in phases)
    t0 = time.monotonic()
    answer, failure = {}, None
    proc = child.start(str(SCRIPT), "--child", ",".join(phases),
                            input=json.dumps(dict(cfg, budgets=budgets)), env=env,
                            timeout=timeout, name=f"gpu_check {'+'.join(phases)}")
    try:
        answer = proc.result()
    except child.ChildError as e:
        failure = ("timeout" if isinstance(e, child.ChildTimeout) else "error",
                   str(e)[-2000:])
        try:     # what the child answered before it was stopped
            answer = child.read_answer(proc.stdout())
        except (LookupError, ValueError, OSError):
            answer = {}
    wall = round(time.monotonic() - t0, 2)
    results, records = {}, {}
    for p in phases:
        got = answer.get("phases", {}).get(p)
        if got is None or got["record"].get("partial"):
            status, error = failure or ("error", "the child did not report this phase")
            records[p] = dict(budget_s=round(budgets[p], 1), status=status, error=error,
                              wall_s=wall, partial=got is not None)
            if got is not None:
                results[p] = got["result"]
        else:
            results[p], records[p] = got["result"], got["record"]
        print(f"[{p}] {records[p]['status']} in {records[p]['wall_s']:.1f} s "
              f"(budget {budgets[p]:.0f} s)", flush=True)
        if records[p]["status"] != "ok":
            print(records[p]["error"], file=sys.stderr)
    if "provenance" in answer:
        results["provenance"] = answer["provenance"]
    return results, records


GROUPS = (("compile", "memory"), ("timing",))   # phases that share a child


def gather(args) -> dict:
    """Run every phase asked for (``--phases``); the data file's content."""
    dry, t_start = args.dry_run, time.monotonic()
    command = " ".join(["lab/gpu_check", *sys.argv[1:]])
    wanted = set(args.phases)
    pred = None
    if not dry and "compile" in wanted:
        pred = gpudata.load_prediction("h200")
        if pred is None:
            raise SystemExit("book/data/gpu_target_h200.json is missing: run "
                             "lab/gpu_check --predict on the CPU first")
    base = dict(dry=dry, command=command, commit=args.commit, prediction=pred,
                neurons=args.neurons)
    data = dict(schema=gpudata.SCHEMA, dry_run=dry, phases={}, compile=[],
                memory=[], timing={"coba": [], "coba_10s": None, "rnn": []},
                notebooks=[], budget_s=args.budget, errors={})
    budgets = {p: share * args.budget for p, share in SHARES.items()}
    pages = args.notebooks
    if pages is None:
        pages = [] if dry else gpu_notebooks.default_pages()
    if (not pages or "notebooks" not in wanted) and not dry:
        budgets["timing"] += budgets["notebooks"]   # no pages: their share to timing
    provs = []
    for group in GROUPS:
        group = tuple(p for p in group if p in wanted)
        if not group:
            continue
        results, records = run_child(group, base, budgets, dry)
        data["phases"].update(records)
        if "provenance" in results:
            provs.append(results.pop("provenance"))
        if results.get("compile"):
            data["compile"] = results["compile"]["rows"]
            data["predicted_on"] = results["compile"]["predicted_on"]
            data["errors"]["compile"] = results["compile"]["errors"]
        if results.get("memory"):
            data["memory"] = results["memory"]["rows"]
            data["errors"]["memory"] = results["memory"]["errors"]
        if results.get("timing"):
            data["timing"] = {k: results["timing"][k]
                              for k in ("coba", "coba_10s", "rnn", "skipped",
                                        "errors")}
    for name in gpu_schema.PHASES:
        if name not in wanted:
            data["phases"][name] = dict(budget_s=0.0, wall_s=0.0, status="skipped",
                                        why="not asked for (--phases)")
    if not provs:   # no phase that imports JAX ran: a child for the provenance alone
        results, _ = run_child(("provenance",), base, {"provenance": 120.0}, dry)
        provs += [results["provenance"]] if "provenance" in results else []
    if not provs:
        raise SystemExit("no phase ran far enough to record its provenance")
    data["provenance"] = provs[0]
    # the push / index crossover beside the earlier GPU run's (--beside)
    if "timing" in wanted:
        earlier = None
        if args.beside and args.beside.is_file():
            earlier = json.loads(args.beside.read_text())
        data["crossover"] = gpu_notebooks.crossover(
            data["timing"]["coba"], earlier,
            str(args.beside.resolve()) if args.beside else None)
        for line in record.crossover_lines(data["crossover"]):
            print(f"[crossover] {line}", flush=True)
    # the pages, each under lax nbval with its own timeout, while the budget lasts
    if "notebooks" in wanted:
        nb_t0 = time.monotonic()
        rows = gpu_notebooks.run_pages(
            pages, lambda: args.budget - (time.monotonic() - t_start),
            args.notebook_timeout, dry, log=lambda m: print(m, flush=True))
        data["notebooks"] = gpu_notebooks.stamp(rows, data["provenance"])
        data["phases"]["notebooks"] = gpu_notebooks.phase_record(
            rows, args.budget - (nb_t0 - t_start), time.monotonic() - nb_t0)
    data["wall_s"] = round(time.monotonic() - t_start, 2)
    return data


def compile_here(jobs: dict) -> list:
    """``jobs`` compiled on this process's first device: one Program each."""
    return [gputarget.compile_here(BUILDERS + b, devices=1, **kw)
            for b, kw in jobs.values()]


def predict(jobs: dict, target: str = "h200") -> dict:
    """``jobs`` compiled for a 1-device GPU ``target`` without a GPU (in the GPU-target
    child): the prediction file's content."""
    progs = gputarget.compile_jobs(
        [dict(builder=BUILDERS + b, kwargs=kw, target=target, devices=1)
         for b, kw in jobs.values()], timeout=1500)
    out = prediction(jobs, progs, progs[0].meta.get("target"))
    out["provenance"]["gpu_target_pins"] = list(gputarget.PINS)
    return out


def prediction(jobs: dict, progs: list, description: str, target: str = "h200") -> dict:
    """The prediction file's content: what each of ``progs`` (``jobs`` compiled)
    holds."""
    prov = dict(command=" ".join(["lab/gpu_check", *sys.argv[1:]]),
                commit=git("rev-parse", "HEAD"),
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                versions={p: version(p) for p in VERSIONS})
    out = dict(schema=gpudata.PREDICTION_SCHEMA, target=target, devices=1,
               description=description, provenance=prov, jobs={})
    for name, (builder, kwargs), prog in zip(jobs, jobs.values(), progs):
        got = summary(prog)
        out["jobs"][name] = dict(builder=builder, kwargs=kwargs,
                                 collectives=got["collectives"], ops=got["ops"],
                                 compile_s=got["compile_s"],
                                 memory={k: got[k] for k in ("arguments", "outputs",
                                                             "aliased", "temporaries",
                                                             "total")})
    return out


def norm(name: str) -> str:
    return name.lower().replace("_", "-")


def wheels(folder: Path) -> int:
    """``pip download`` the device's missing wheels, pinned as the book pins them (the
    BrainPy family and the nbval runner), and say how many MiB they take."""
    pinned = pins()
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(folder)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    cmd += [f"{w}=={pinned[norm(w)]}" for w in (*WHEELS, *NB_WHEELS)]
    print(" ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    # the device's copy of the tree has no .git: the commit travels beside the wheels
    (folder / "COMMIT").write_text((git("rev-parse", "HEAD") or "unknown") + "\n")
    files = sorted(folder.glob("*.whl"))
    mib = sum(f.stat().st_size for f in files) / 2**20
    print(f"[wheels] {len(files)} wheels in {folder}: {mib:.1f} MiB "
          f"(at most {WHEELS_MAX_MIB} MiB: they travel with the tree, 64 MiB in all)")
    if mib > WHEELS_MAX_MIB:
        print("[wheels] too large to carry", file=sys.stderr)
        return rc or 1
    return rc


PLACES = {"<repo>": "the repository's root on the machine that ran the check",
          "<out>": "the folder given as --out"}


def scrub(obj, paths: dict):
    """``obj`` with each folder of ``paths`` (absolute path -> placeholder) replaced in
    every string, longest first: a data file names no machine's folders (tracebacks,
    the command line), and says what stands in their place (``PLACES``)."""
    if isinstance(obj, str):
        for folder in sorted(paths, key=len, reverse=True):
            obj = obj.replace(folder, paths[folder])
        return obj
    if isinstance(obj, list):
        return [scrub(x, paths) for x in obj]
    if isinstance(obj, dict):
        return {k: scrub(v, paths) for k, v in obj.items()}
    return obj


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="the same code path on the CPU, tiny sizes, not book/data")
    ap.add_argument("--predict", action="store_true",
                    help="write book/data/gpu_target_h200.json (a GPU-target compile)")
    ap.add_argument("--wheels", type=Path, metavar="DIR",
                    help="download the device's missing wheels into DIR, then stop")
    ap.add_argument("--out", type=Path, help="folder of the data file")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds in all")
    ap.add_argument("--notebooks", nargs="*", default=None, metavar="PAGE[=S]",
                    help="pages to run under lax nbval, each PATH or PATH=SECONDS "
                    "(default: on a GPU the quick start and the four core chapters, "
                    "then every other page of _toc.yml; none in a dry run)")
    ap.add_argument("--notebook-timeout", type=float, default=180,
                    help="a page's timeout, unless PAGE=S gives its own")
    ap.add_argument("--phases", type=lambda t: t.split(","),
                    default=list(gpu_schema.PHASES),
                    help="comma-separated, of " + ",".join(gpu_schema.PHASES)
                    + " (default: all; the others are marked skipped)")
    ap.add_argument("--neurons", type=int, nargs="+", metavar="N",
                    help="the COBA-HH sizes of the timing (default: 4,200 to 16 M "
                    "while the budget lasts)")
    ap.add_argument("--beside", type=Path,
                    default=gpudata.DATA_DIR / "gpu_h200.json",
                    help="an earlier GPU data file whose push / index times the "
                    "new ones are set beside (default: book/data/gpu_h200.json)")
    ap.add_argument("--suffix", type=lambda t: t if re.fullmatch(r"[a-z0-9]+", t)
                    else ap.error("--suffix: lower-case letters and digits"),
                    help="name the file gpu_<device>_<suffix>.json: a run of some "
                    "phases beside the device's full file (e.g. 'pages')")
    ap.add_argument("--commit", help="the commit, where the tree has no .git")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    unknown = set(args.phases) - set(gpu_schema.PHASES)
    if unknown:
        ap.error(f"--phases: no phase {', '.join(sorted(unknown))}")
    if args.child:
        return child_main(args.child)
    if args.wheels:
        return wheels(args.wheels)
    if args.predict:
        jobs = prediction_jobs()
        data = gpu_schema.validate_prediction(predict(jobs, "h200"))
        path = (args.out or gpudata.DATA_DIR) / "gpu_target_h200.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")
        return 0
    out = args.out or (Path(tempfile.mkdtemp(prefix="gpu_check_")) if args.dry_run
                       else gpudata.DATA_DIR)
    data = gather(args)
    slug = gpudata.device_slug(data["provenance"]["device_kind"]
                                    if not args.dry_run else "cpu")
    out.mkdir(parents=True, exist_ok=True)
    data = scrub(data, {str(ROOT): "<repo>", str(out.resolve()): "<out>"})
    data["provenance"]["places"] = PLACES
    path = out / f"gpu_{slug}{'_' + args.suffix if args.suffix else ''}.json"
    try:
        gpu_schema.validate(data)
    except gpudata.GpuDataError:
        bad = path.with_suffix(".rejected.json")
        bad.write_text(json.dumps(data, indent=1, default=str) + "\n")
        print(f"the data failed validation; kept in {bad}", file=sys.stderr)
        traceback.print_exc()
        return 1
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    failed = [p for p, r in data["phases"].items()
              if r["status"] in ("error", "timeout")]
    print(f"wrote {path} in {data['wall_s']:.0f} s"
          + (f"; phases that failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
