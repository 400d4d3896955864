#!/usr/bin/env python
"""COBA-HH in Brian 2: the reference simulator's side of lab/coba_reference.py.

Runs in the Brian 2 virtual environment (lab/requirements-brian2.txt), never in the
book's: it imports neither JAX nor shardbook.  The model is Brian 2's own
``examples/COBAHH.py`` (the same at tags 2.9.0 and 2.10.1): its equations, parameters,
threshold (v > -20 mV), refractoriness (3 ms) and exponential Euler, in float64, with
the cython code generator (or, in ``standalone``, Brian's cpp_standalone device).
What changes between runs comes in a JSON spec:

* ``graph``: ``"bernoulli"`` (``connect(p=...)``, the example's), ``"fixed"`` (NEST's
  ``fixed_indegree``, drawn with numpy: ``k`` sources per neuron, with replacement) or
  ``"file"`` (the book's own graph: source and target arrays in ``export``);
* ``start``: ``"random"`` (the example's), ``"kick"`` (NEST's hh_coba: V = E_L, NEST's
  initial gates, a 300 Hz Poisson kick onto 50 E neurons from 1 to 51 ms) or ``"file"``
  (the book's initial V, g_e, g_i and kick events, from ``export``);
* ``gates``: with ``"kick"``, NEST's initial (m, h, n), which lab/coba_reference.py
  takes from ``shardbook.coba.nest_initial_gates`` (the one place they are computed).

    python lab/brian2_coba.py run SPEC.json OUT.npz      # spikes (neuron, step) to OUT
    python lab/brian2_coba.py serve SPEC.json       # timing: lines "run MS" on stdin
    python lab/brian2_coba.py standalone SPEC.json  # the same, cpp_standalone

``serve`` builds the network, runs 10 ms (compiling into Brian's cython cache), prints
``READY``, then answers every ``run MS`` line with one JSON line: the wall seconds of
``run(MS * ms)`` and the spikes in it.  ``rates`` in the spec picks the rate functions'
form (``"exprel"``, the example's; ``"exp"``, its form before 2019: see ``RATES``).

``standalone`` is ``serve`` in Brian's ``cpp_standalone`` mode, one thread (OpenMP
off): it writes the C++ project (a 10 ms warm-up run, whose spikes are not counted,
then a ``duration_ms`` run), compiles it with ``make`` (code generation and ``make``
timed apart, in ``READY``), then answers every ``run MS`` line (``MS`` must be
``duration_ms``) by running the binary again from the same start: Brian's own clock of
the timed run (``seconds``), the binary's wall time with its loading and writing
(``process_seconds``), and the spikes of the timed run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

# The rate functions: "exprel" is examples/COBAHH.py as it stands at tags 2.9.0 and
# 2.10.1 (commit 28baceb8, "Use exprel in examples", 2019-11-14; it is the model
# everywhere in this book); "exp" is the same example before that commit (Brette et
# al. 2007's form, x/(exp(x/k) - 1), with its removable singularity), kept only to
# say what exprel costs.  alpha_h, beta_h and beta_n are the same in both.
RATES = {
    "exprel": """
alpha_m = 0.32*(mV**-1)*4*mV/exprel((13*mV-v+VT)/(4*mV))/ms : Hz
beta_m = 0.28*(mV**-1)*5*mV/exprel((v-VT-40*mV)/(5*mV))/ms : Hz
alpha_n = 0.032*(mV**-1)*5*mV/exprel((15*mV-v+VT)/(5*mV))/ms : Hz
""",
    "exp": """
alpha_m = 0.32*(mV**-1)*(13*mV-v+VT)/
         (exp((13*mV-v+VT)/(4*mV))-1.)/ms : Hz
beta_m = 0.28*(mV**-1)*(v-VT-40*mV)/
        (exp((v-VT-40*mV)/(5*mV))-1)/ms : Hz
alpha_n = 0.032*(mV**-1)*(15*mV-v+VT)/
         (exp((15*mV-v+VT)/(5*mV))-1.)/ms : Hz
""",
}

EQS_COMMON = """
dv/dt = (gl*(El-v)+ge*(Ee-v)+gi*(Ei-v)-
         g_na*(m*m*m)*h*(v-ENa)-
         g_kd*(n*n*n*n)*(v-EK))/Cm : volt
dm/dt = alpha_m*(1-m)-beta_m*m : 1
dn/dt = alpha_n*(1-n)-beta_n*n : 1
dh/dt = alpha_h*(1-h)-beta_h*h : 1
dge/dt = -ge*(1./taue) : siemens
dgi/dt = -gi*(1./taui) : siemens
alpha_h = 0.128*exp((17*mV-v+VT)/(18*mV))/ms : Hz
beta_h = 4./(1+exp((40*mV-v+VT)/(5*mV)))/ms : Hz
beta_n = .5*exp((10*mV-v+VT)/(40*mV))/ms : Hz
"""



def _ready(b2, **info) -> None:
    """Tell the parent the simulator is built: READY and what it took, with versions."""
    info.update(brian2=b2.__version__, numpy=np.__version__)
    print("READY " + json.dumps(info), flush=True)


def _say(**fields) -> None:
    """One answer to the parent: a JSON line."""
    print(json.dumps(fields), flush=True)


def _commands():
    """The parent's commands, one line each, until "quit" or the end of input."""
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            return
        yield cmd

def equations(rates: str = "exprel") -> str:
    """The model's equations with the rate functions of ``rates`` (see RATES)."""
    return EQS_COMMON + RATES[rates]


EQS = equations("exprel")  # the example's own form (tags 2.9.0, 2.10.1)


def build(spec):
    """The network of ``spec``; returns (Network, SpikeMonitor, neurons)."""
    import brian2 as b2
    from brian2 import cm, ms, msiemens, mV, nS, siemens, ufarad, umetre

    if spec.get("device", "runtime") == "runtime":
        b2.prefs.codegen.target = spec.get("target", "cython")
    b2.defaultclock.dt = spec.get("dt", 0.1) * ms
    b2.seed(spec["seed"])
    rng = np.random.default_rng(spec["seed"])
    area = 20000 * umetre**2
    ns = dict(
        Cm=(1 * ufarad * cm**-2) * area,
        gl=(5e-5 * siemens * cm**-2) * area,
        El=-60 * mV,
        EK=-90 * mV,
        ENa=50 * mV,
        g_na=(100 * msiemens * cm**-2) * area,
        g_kd=(30 * msiemens * cm**-2) * area,
        VT=-63 * mV,
        taue=5 * ms,
        taui=10 * ms,
        Ee=0 * mV,
        Ei=-80 * mV,
        we=6 * nS,
        wi=67 * nS,
    )
    n_exc, n_inh = spec["n_exc"], spec["n_inh"]
    n = n_exc + n_inh
    P = b2.NeuronGroup(
        n,
        model=b2.Equations(equations(spec.get("rates", "exprel"))),
        threshold="v>-20*mV",
        refractory=spec.get("refractory_ms", 3.0) * ms,
        method="exponential_euler",
        namespace=ns,
    )
    Pe, Pi = P[:n_exc], P[n_exc:]
    Ce = b2.Synapses(Pe, P, on_pre="ge+=we", namespace=ns)
    Ci = b2.Synapses(Pi, P, on_pre="gi+=wi", namespace=ns)
    export = np.load(spec["export"]) if spec.get("export") else None
    graph, k = spec["graph"], spec.get("k", (64, 16))
    if graph == "bernoulli":
        Ce.connect(p=spec.get("p", 0.02))
        Ci.connect(p=spec.get("p", 0.02))
    elif graph == "fixed":  # k sources per target, uniform, with replacement
        for syn, n_pre, kk in ((Ce, n_exc, k[0]), (Ci, n_inh, k[1])):
            syn.connect(
                i=rng.integers(0, n_pre, size=kk * n), j=np.repeat(np.arange(n), kk)
            )
    elif graph == "file":
        Ce.connect(i=export["exc_pre"], j=export["exc_post"])
        Ci.connect(i=export["inh_pre"], j=export["inh_post"])
    else:
        raise ValueError(f"graph {graph!r}")
    objects = [P, Ce, Ci]
    start = spec["start"]
    if start == "random":
        P.v = "El + (randn() * 5 - 5)*mV"
        P.ge = "(randn() * 1.5 + 4) * 10.*nS"
        P.gi = "(randn() * 12 + 20) * 10.*nS"
    elif start == "kick":
        m0, h0, n0 = spec["gates"]
        P.v, P.m, P.h, P.n = -60 * mV, m0, h0, n0
        kick = b2.PoissonGroup(50, rates="300*Hz*int(t >= 1*ms)*int(t < 51*ms)")
        K = b2.Synapses(kick, P, on_pre="ge+=we", namespace=ns)
        K.connect(j="i")
        objects += [kick, K]
    elif start == "file":
        P.v = export["V"] * mV
        P.ge, P.gi = export["ge"] * nS, export["gi"] * nS
        if "m" in export:
            P.m, P.h, P.n = export["m"], export["h"], export["n"]
        if "kick_neuron" in export and len(export["kick_neuron"]):
            # one generator per (neuron, event of a step): NEST's multiplicity
            ids, steps = export["kick_neuron"], export["kick_step"]
            slot = np.zeros(len(ids), int)
            seen = {}
            for q, key in enumerate(zip(ids.tolist(), steps.tolist())):
                slot[q] = seen.get(key, 0)
                seen[key] = slot[q] + 1
            width = int(slot.max()) + 1
            gen = b2.SpikeGeneratorGroup(
                50 * width, ids * width + slot, (steps - 1) * spec.get("dt", 0.1) * ms
            )
            K = b2.Synapses(gen, P, on_pre="ge+=we", namespace=ns)
            K.connect(i=np.arange(50 * width), j=np.arange(50 * width) // width)
            objects += [gen, K]
    else:
        raise ValueError(f"start {start!r}")
    mon = b2.SpikeMonitor(P, record=spec.get("record", True))
    net = b2.Network(*objects, mon)
    return net, mon, n


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    mode, spec = argv[0], json.loads(open(argv[1]).read())
    import brian2 as b2

    b2.BrianLogger.log_level_error()
    if mode == "standalone":
        return standalone(spec, b2)
    t0 = time.perf_counter()
    net, mon, n = build(spec)
    build_s = time.perf_counter() - t0
    if mode == "run":
        t0 = time.perf_counter()
        net.run(spec["duration_ms"] * b2.ms)
        run_s = time.perf_counter() - t0
        dt = spec.get("dt", 0.1)
        steps = np.rint(np.asarray(mon.t / b2.ms) / dt).astype(np.int32)
        np.savez_compressed(
            argv[2], neuron=np.asarray(mon.i, np.int32), step=steps, neurons=n, dt=dt
        )
        _say(build_s=build_s, run_s=run_s, spikes=int(mon.num_spikes),
             brian2=b2.__version__, numpy=np.__version__)
        return 0
    if mode == "serve":
        t0 = time.perf_counter()
        net.run(10 * b2.ms)  # compiles, or loads from the cython cache
        _ready(b2, build_s=build_s, warm_s=time.perf_counter() - t0)
        for cmd in _commands():
            before = int(mon.num_spikes)
            t0 = time.perf_counter()
            net.run(float(cmd[1]) * b2.ms)
            seconds = time.perf_counter() - t0
            _say(seconds=seconds, spikes=int(mon.num_spikes) - before)
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


def standalone(spec, b2) -> int:
    """``standalone``: build the network as a C++ project, one thread (no OpenMP),
    with a 10 ms warm-up run (its spikes not counted) and a ``duration_ms`` run; time
    code generation and ``make`` apart; then answer each ``run`` line by running the
    compiled binary once more, from the same start."""
    import tempfile

    directory = spec.get("directory") or tempfile.mkdtemp(prefix="brian2_coba_")
    b2.set_device("cpp_standalone", directory=directory, build_on_run=False)
    b2.prefs.devices.cpp_standalone.openmp_threads = 0
    t0 = time.perf_counter()
    net, mon, n = build(spec)
    mon.active = False
    net.run(10 * b2.ms)
    mon.active = True
    net.run(spec["duration_ms"] * b2.ms)
    define_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    b2.device.build(directory=directory, compile=True, run=False, with_output=False)
    build_s = time.perf_counter() - t0
    make = b2.device.timers["compile"]
    _ready(
        b2,
        define_s=define_s,
        codegen_s=build_s - make["make"] - (make["clean"] or 0.0),
        make_s=make["make"],
        make_clean_s=make["clean"],
        build_s=build_s,
        directory=directory,
        compile_args=list(b2.prefs.codegen.cpp.extra_compile_args_gcc),
        openmp_threads=b2.prefs.devices.cpp_standalone.openmp_threads,
    )
    for cmd in _commands():
        if float(cmd[1]) != spec["duration_ms"]:
            raise SystemExit(f"built for {spec['duration_ms']} ms, asked {cmd[1]}")
        t0 = time.perf_counter()
        b2.device.run(directory, with_output=False)
        process_s = time.perf_counter() - t0
        # the binary writes its own clock of Network::run: "<seconds> <fraction>"
        info = Path(b2.device.results_dir) / "last_run_info.txt"
        run_s = float(info.read_text().split()[0])
        # Brian's own clock of Network::run for the timed run: std::clock (CPU
        # seconds) without OpenMP, the wall seconds of one thread
        _say(seconds=run_s, process_seconds=process_s, spikes=int(mon.num_spikes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
