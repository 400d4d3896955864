"""The COBA-HH network of chapter 4, written once and used everywhere.

The network is benchmark 3 of Brette et al. (2007), "Simulation of networks of spiking
neurons: a review of tools and strategies", J. Comput. Neurosci. 23:349-398: Hodgkin-Huxley
neurons with Traub-Miles kinetics, conductance-based exponential synapses, 80 % excitatory
and 20 % inhibitory neurons, sparse random connectivity, dt = 0.1 ms.  BrainPy's own
versions of it are the anchors for the parameters and the code style:

* BrainPy examples, ``ei_nets/Brette_2007_COBAHH.py`` (github.com/brainpy/examples);
* the BrainPy eLife paper's code (brainpy-elife-reproducibility, read at
  github.com/PKU-NIP-Lab/brainpy-paper-reproducibility), ``figure8B/COBAHH-TPU.py``: the
  neuron-sharded version with a fixed in-degree index matrix (``IndLinear``), 80 inputs per neuron;
* github.com/brainpy/brainpy-iclr24-reproducibility,
  ``Submit_code/5.1_EI_balanced_network/brainpy_COBAHH.py``.

Chapter 4 shows this file section by section, chapter 5 reuses it, and ``ci/coba_sweep.py``
runs it on GPUs.  It needs :func:`shardbook.setup_devices` to have run first, like every
module that imports BrainPy.

Sections:  parameters; sharded random numbers; the neuron; the connectivity; the network;
running; memory model and measurements; statistics; the scaling data file.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import sys
import time
from pathlib import Path

import numpy as np

import jax
import jax.numpy as jnp

import brainpy as bp
import brainpy.math as bm

NEURON = bm.sharding.NEU_AXIS  # the mesh axis name, 'neuron'

# ----------------------------------------------------------------------------- parameters
# Units: mV, ms, nS, pF, so that nS * mV / pF = mV / ms.  (Brette et al. 2007, benchmark 3;
# the same numbers as BrainPy's Brette_2007_COBAHH.py.)
DT = 0.1                                      # ms
Cm = 200.                                     # membrane capacitance, pF
gl, g_Na, g_Kd = 10., 20_000., 6_000.         # leak, sodium, potassium conductances, nS
El, ENa, EK = -60., 50., -90.                 # reversal potentials, mV
VT = -63.                                     # Traub-Miles threshold shift, mV
V_th = -20.                                   # a spike is V crossing -20 mV upwards
taue, taui = 5., 10.                          # synaptic time constants, ms
Ee, Ei = 0., -80.                             # synaptic reversal potentials, mV
we, wi = 6., 67.                              # synaptic weights (conductance jumps), nS
K_EXC, K_INH = 64, 16                         # fixed in-degree: 80 inputs = 2 % of 4000
N_EXC_UNIT, N_INH_UNIT = 3360, 840            # scale 1: 4200 neurons; 840 = lcm(1..8)

REPRESENTATIONS = ("index", "mask", "csr", "jit")


def sizes(scale: float = 1) -> tuple[int, int]:
    """(excitatory, inhibitory) neuron counts at a scale; the in-degree stays 80."""
    n_exc, n_inh = round(N_EXC_UNIT * scale), round(N_INH_UNIT * scale)
    if n_exc < 1 or n_inh < 1:
        raise ValueError(f"scale {scale} gives no neurons")
    return n_exc, n_inh


# ------------------------------------------------------------- sharded random numbers
def sharded_random(fn, key, axis_names, *static):
    """``fn(key, *static)`` computed under ``jit`` with ``out_shardings``: each device makes its own slice.

    ``axis_names`` names the output's axes (a dict of them when ``fn`` returns a dict).  ``jit``
    never lets a sharding change a result, so the numbers are the same on every mesh; JAX's
    partitionable threefry (the default since JAX 0.5) lets each device compute only its own
    slice, so the whole array never exists on one device.  Outside a ``device_mesh`` block there
    is no sharding and the arrays land on the default device.
    """
    if isinstance(axis_names, dict):
        sharding = {name: bm.sharding.get_sharding(names) for name, names in axis_names.items()}
        sharding = None if None in sharding.values() else sharding
    else:
        sharding = bm.sharding.get_sharding(axis_names)
    return _compiled(fn, key, sharding, static)(key)  # jax.jit(fn, out_shardings=sharding), compiled once


def random_state(key, populations, projections):
    """Every random array of a network, from one key, in one compiled program.

    ``populations``: ((name, size), ...), each gets initial potentials ``"<name>.V"``;
    ``projections``: ((name, k, n_pre, n_post), ...), each gets a ``[k, n_post]`` matrix of
    presynaptic sources drawn with replacement.  Every piece has its own stream (``fold_in``).
    """
    out = {}
    for i, (name, size) in enumerate(populations):
        out[f"{name}.V"] = El - 5. + 5. * jax.random.normal(jax.random.fold_in(key, i), (size,), jnp.float32)
    for i, (name, k, n_pre, n_post) in enumerate(projections, start=100):
        out[name] = jax.random.randint(jax.random.fold_in(key, i), (k, n_post), 0, n_pre, dtype=jnp.int32)
    return out


def random_state_axes(populations, projections):
    """The axis names of ``random_state``'s outputs: neurons split, sources split by column."""
    return {f"{name}.V": [NEURON] for name, _ in populations} | {p[0]: [None, NEURON] for p in projections}


def _zeros(n, dtype=jnp.float32):
    """A Variable of ``n`` zeros, made split along ``neuron``."""
    return bm.Variable(sharded_random(_zeros_of, jax.random.PRNGKey(0), [NEURON], n, jnp.dtype(dtype)))


# ----------------------------------------------------------------------- the neuron
class HH(bp.dyn.NeuDyn):
    """Hodgkin-Huxley neurons with Traub-Miles kinetics, every state split along ``neuron``."""

    def __init__(self, V0, method="exp_auto"):
        super().__init__(V0.shape[0], sharding=[NEURON], method=method)
        n = self.num
        self.V = bm.Variable(V0)  # already split: made by random_state
        self.m, self.h, self.n = _zeros(n), _zeros(n), _zeros(n)
        self.spike = _zeros(n, bool)
        self.integral = bp.odeint(bp.JointEq(self.dV, self.dm, self.dh, self.dn), method=method)

    def dV(self, V, t, m, h, n):
        I_syn = self.sum_current_inputs(V)  # the COBA synapses: g * (E - V)
        g_na = g_Na * (m * m * m) * h
        g_kd = g_Kd * (n * n * n * n)
        return (-gl * (V - El) - g_na * (V - ENa) - g_kd * (V - EK) + I_syn) / Cm

    # x / (exp(x) - 1) is 0/0 at x = 0; 1 / exprel(x) is the same function without the hole,
    # so float32 stays finite over long runs.
    def dm(self, m, t, V):
        alpha = 1.28 / bm.exprel((13. - V + VT) / 4.)  # 0.32 (13 - V + VT) / (exp(...) - 1)
        beta = 1.4 / bm.exprel((V - VT - 40.) / 5.)  # 0.28 (V - VT - 40) / (exp(...) - 1)
        return alpha * (1. - m) - beta * m

    def dh(self, h, t, V):
        alpha = 0.128 * bm.exp((17. - V + VT) / 18.)
        beta = 4. / (1. + bm.exp(-(V - VT - 40.) / 5.))
        return alpha * (1. - h) - beta * h

    def dn(self, n, t, V):
        alpha = 0.16 / bm.exprel((15. - V + VT) / 5.)  # 0.032 (15 - V + VT) / (exp(...) - 1)
        beta = 0.5 * bm.exp((10. - V + VT) / 40.)
        return alpha * (1. - n) - beta * n

    def update(self):
        V, m, h, n = self.integral(self.V.value, self.m.value, self.h.value, self.n.value,
                                   bp.share["t"], dt=bp.share["dt"])
        self.spike.value = jnp.logical_and(self.V.value < V_th, V >= V_th)
        self.V.value, self.m.value, self.h.value, self.n.value = V, m, h, n
        return self.spike.value


# ------------------------------------------------------------------ the connectivity
class FixedInDegree(bp.dnn.Layer):
    """Each postsynaptic neuron receives ``k`` presynaptic sources, given as a ``[k, n_post]`` matrix.

    ``kind`` is how that random graph is stored:
      * ``"index"``: a ``[k, n_post]`` int32 matrix of sources, split along the post axis;
      * ``"mask"``:  a dense ``[n_pre, n_post]`` uint8 matrix (how often j feeds i), split along post;
      * ``"csr"``:   BrainPy's ``EventCSRLinear`` (no ``sharding`` support: held whole);
      * ``"jit"``:   BrainPy's ``EventJitFPHomoLinear``: a new graph with the same
        connection probability k / n_pre, regenerated from a seed at every step.
    ``as_variable=False`` keeps the index or mask as a plain attribute: the closure-constant trap.
    """

    def __init__(self, sources, n_pre, weight, kind="index", as_variable=True, seed=0):
        super().__init__()
        if kind not in REPRESENTATIONS:
            raise ValueError(f"kind must be one of {REPRESENTATIONS}, not {kind!r}")
        k, n_post = sources.shape  # sources: the [k, n_post] matrix made by random_state
        self.kind, self.weight, self.shape = kind, weight, (n_pre, n_post)
        if kind == "jit":
            self.op = bp.dnn.EventJitFPHomoLinear(n_pre, n_post, prob=k / n_pre, weight=weight, seed=seed)
            return
        if kind == "csr":
            self.op = bp.dnn.EventCSRLinear(_csr_conn(np.asarray(sources), n_pre, n_post), weight)
            return
        if kind == "mask":  # each device counts the sources of its own columns
            sources = sharded_random(_count_sources, sources, [None, NEURON], n_pre)
        # A Variable is an argument of the compiled step and keeps its sharding.
        # A plain attribute is a closure constant: baked whole into every device's program.
        self.conn = bm.Variable(sources) if as_variable else sources

    def update(self, spikes):  # spikes: bool[n_pre], the same on every device
        if self.kind in ("csr", "jit"):
            return self.op(spikes)
        conn = self.conn.value if isinstance(self.conn, bm.Variable) else self.conn
        if self.kind == "index":
            count = jnp.sum(spikes[conn], axis=0, dtype=jnp.float32)
        else:
            count = jnp.sum(jnp.where(spikes[:, None], conn, jnp.uint8(0)), axis=0, dtype=jnp.float32)
        return count * self.weight  # an integer count times the weight: exact in float32


def _count_sources(sources, n_pre):  # column j of the result: how often each source feeds j
    return jax.vmap(lambda col: jnp.zeros((n_pre,), jnp.uint8).at[col].add(1), in_axes=1, out_axes=1)(sources)


def _csr_conn(sources: np.ndarray, n_pre: int, n_post: int):
    """The same graph as a ``[k, n_post]`` source matrix, in BrainPy's CSR connector (pre -> post)."""
    k = sources.shape[0]
    pre = sources.T.reshape(-1)
    post = np.repeat(np.arange(n_post, dtype=np.int32), k)
    order = np.argsort(pre, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(pre, minlength=n_pre))]).astype(np.int32)
    return bp.conn.CSRConn(post[order].astype(np.int32), indptr)(n_pre, n_post)


# ----------------------------------------------------------------------- the network
class COBAHH(bp.DynSysGroup):
    """COBA-HH: E and I populations, four fixed in-degree projections, split along ``neuron``.

    Build it inside ``bm.sharding.device_mesh(devices, [NEURON])``: BrainPy resolves every
    sharding when a model is constructed.  ``layout="sliced"`` is the trap variant: one
    population of ``n_exc + n_inh`` neurons, sliced into E and I at every step.
    """

    def __init__(self, scale=1, conn="index", as_variable=True, layout="separate", seed=0):
        super().__init__()
        bm.set_dt(DT)
        self.n_exc, self.n_inh = sizes(scale)
        self.conn_kind, self.layout, self.seed = conn, layout, seed
        split = bm.sharding.get_sharding([NEURON])  # None when there is no mesh
        self.mesh = None if split is None else split.mesh
        self.replicated = None if split is None else jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())

        if layout == "separate":
            pops = (("E", self.n_exc), ("I", self.n_inh))
            plan = (("E2E", "E", "E", K_EXC, we, taue, Ee), ("E2I", "E", "I", K_EXC, we, taue, Ee),
                    ("I2E", "I", "E", K_INH, wi, taui, Ei), ("I2I", "I", "I", K_INH, wi, taui, Ei))
        elif layout == "sliced":
            pops = (("N", self.n_exc + self.n_inh),)
            plan = (("E2N", "E", "N", K_EXC, we, taue, Ee), ("I2N", "I", "N", K_INH, wi, taui, Ei))
        else:
            raise ValueError(f"layout must be 'separate' or 'sliced', not {layout!r}")
        size = dict(pops, E=self.n_exc, I=self.n_inh)
        projs = tuple((name, k, size[pre], size[post]) for name, pre, post, k, *_ in plan)
        init = sharded_random(random_state, jax.random.PRNGKey(seed), random_state_axes(pops, projs), pops, projs)

        for name, _ in pops:
            setattr(self, name, HH(init[f"{name}.V"]))
        for i, (name, pre, post, k, w, tau, E) in enumerate(plan):
            target = getattr(self, post)
            setattr(self, name, bp.dyn.HalfProjAlignPostMg(
                comm=FixedInDegree(init[name], size[pre], w, conn, as_variable, seed=1000 * seed + i),
                syn=bp.dyn.Expon.desc(target.num, tau=tau, sharding=[NEURON]),
                out=bp.dyn.COBA.desc(E=E), post=target))

    def everyone(self, spikes):
        """Every device needs every presynaptic spike: one all-gather per population and step."""
        if self.replicated is None:
            return spikes
        return jax.lax.with_sharding_constraint(spikes, self.replicated)

    def update(self):
        if self.layout == "separate":
            e, i = self.everyone(self.E.spike.value), self.everyone(self.I.spike.value)
            self.E2E(e), self.E2I(e), self.I2E(i), self.I2I(i)
            return {"E": self.E(), "I": self.I()}
        s = self.N.spike.value  # slicing a sharded vector moves the E/I boundary between devices
        self.E2N(self.everyone(s[:self.n_exc])), self.I2N(self.everyone(s[self.n_exc:]))
        return {"N": self.N()}

    @property
    def populations(self) -> dict:
        if self.layout == "separate":
            return {"E": self.E, "I": self.I}
        return {"N": self.N}

    @property
    def projections(self) -> dict:
        names = ("E2E", "E2I", "I2E", "I2I") if self.layout == "separate" else ("E2N", "I2N")
        return {n: getattr(self, n) for n in names}


# ----------------------------------------------------------------------------- running
class Simulation:
    """Compile the network's time loop once, then run it in chunks.

    ``record`` chooses what comes back from each step: ``"spike"`` (a ``[T, n]`` raster per
    population, split along neurons like the state), ``"V"`` (membrane potentials, the same),
    ``"count"`` (spikes per neuron, summed on the device that owns the neuron: no raster kept)
    and ``"rate"`` (population spike counts per step: a reduction across devices, see chapter 4).
    """

    def __init__(self, net: COBAHH, record=("spike",)):
        self.net, self.record, self.t = net, tuple(record), 0
        self.counts = {}
        if "count" in self.record:  # a counter per neuron, split like the neurons
            for name, pop in net.populations.items():
                zeros = jax.jit(_zeros_of, static_argnums=(1, 2), out_shardings=pop.spike.value.sharding)
                self.counts[name] = bm.Variable(zeros(jax.random.PRNGKey(0), pop.num, jnp.dtype(jnp.int32)))
        self._jit = bm.jit(self._loop)
        self.compiled = {}
        self.compile_s = {}

    def _step(self, i):
        spikes = self.net.step_run(i)
        out = {}
        for name, pop in self.net.populations.items():
            if "spike" in self.record:
                out[f"{name}.spike"] = spikes[name]
            if "V" in self.record:
                out[f"{name}.V"] = pop.V.value
            if "count" in self.record:
                self.counts[name].value += spikes[name]
            if "rate" in self.record:
                out[f"{name}.rate"] = jnp.sum(spikes[name], dtype=jnp.int32)
        return out

    def _loop(self, indices):
        return bm.for_loop(self._step, indices)

    def compile(self, steps: int):
        """Lower and compile a ``steps``-long chunk (once per length); returns the compiled program."""
        if steps not in self.compiled:
            t0 = time.perf_counter()
            self.compiled[steps] = self._jit.compile(np.arange(steps))
            self.compile_s[steps] = time.perf_counter() - t0
        return self.compiled[steps]

    def run(self, steps: int) -> dict:
        """Advance ``steps`` time steps; returns the recorded arrays (still on the devices)."""
        self.compile(steps)
        out = self._jit(np.arange(self.t, self.t + steps))
        # wait for the whole program: with nothing recorded, only the new state says it is done
        jax.block_until_ready((out, [pop.V.value for pop in self.net.populations.values()]))
        self.t += steps
        return out

    def timed_run(self, steps: int) -> tuple[dict, float]:
        """``run`` and its wall time in seconds (compilation excluded)."""
        self.compile(steps)
        t0 = time.perf_counter()
        out = self.run(steps)
        return out, time.perf_counter() - t0


def build(devices=None, **kwargs) -> COBAHH:
    """Construct :class:`COBAHH` on a 1-D ``neuron`` mesh over ``devices`` (``None``: no mesh)."""
    if devices is None:
        return COBAHH(**kwargs)
    with bm.sharding.device_mesh(np.asarray(devices), [NEURON]):
        return COBAHH(**kwargs)


# ------------------------------------------------------ memory model and measurements
STATE_BYTES_PER_NEURON = 4 * 4 + 2 * 4   # V, m, h, n and the two conductances g_e, g_i: float32
SPIKE_BYTES_PER_NEURON = 1               # last step's spikes (bool): the one-step synaptic delay
INDEX_BYTES_PER_SYNAPSE = 4              # an int32 source index per synapse
SYNAPSES_PER_NEURON = K_EXC + K_INH      # 80 inputs per neuron at every scale


def conn_bytes_total(n_exc: int, n_inh: int, kind: str = "index") -> int:
    """Bytes of the whole network's connectivity in one representation (all devices together)."""
    n = n_exc + n_inh
    if kind == "index":
        return INDEX_BYTES_PER_SYNAPSE * SYNAPSES_PER_NEURON * n
    if kind == "mask":
        return n * n  # one uint8 per (pre, post) pair
    if kind == "csr":  # int32 post index per synapse + int32 row pointers (n_pre + 1 per projection)
        return 4 * SYNAPSES_PER_NEURON * n + 4 * (2 * (n_exc + 1) + 2 * (n_inh + 1))
    if kind == "jit":
        return 0
    raise ValueError(kind)


def predict(n_exc: int, n_inh: int, devices: int, kind: str = "index", record_bytes_per_neuron: float = 0) -> dict:
    """Predicted bytes on the fullest device.

    Split representations divide by the device count; CSR is held whole on every device; JIT
    connectivity holds nothing.  ``peak`` adds the step's outputs (a new copy of the state,
    since the inputs are not donated) and what the run records per neuron.
    """
    n = n_exc + n_inh
    per = n / devices
    conn = conn_bytes_total(n_exc, n_inh, kind)
    if kind in ("index", "mask"):
        conn /= devices
    out = dict(state=STATE_BYTES_PER_NEURON * per, delays=SPIKE_BYTES_PER_NEURON * per, connectivity=conn)
    out["arguments"] = out["state"] + out["delays"] + (conn if kind in ("index", "mask") else 0)
    out["peak"] = out["arguments"] + (STATE_BYTES_PER_NEURON + SPIKE_BYTES_PER_NEURON + record_bytes_per_neuron) * per
    if kind == "csr":
        out["peak"] += conn
    return {k: int(round(v)) for k, v in out.items()}


def fit_bytes_per_device(n: int, devices: int, record_bytes_per_neuron: float = 8) -> float:
    """Predicted peak bytes per device for ``n`` neurons (index representation), used for sizing.

    ``predict``'s peak plus the gathered presynaptic spikes: one byte per neuron of the *whole*
    network on every device.  The default record is a spike counter per neuron (int32, read and
    written: 8 bytes), as in ``measure_size``.
    """
    n_exc = round(0.8 * n)
    return predict(n_exc, n - n_exc, devices, "index", record_bytes_per_neuron)["peak"] + n * SPIKE_BYTES_PER_NEURON


def _leaf(x):
    return x.value if isinstance(x, bm.Variable) else x


def net_arrays(net: COBAHH) -> dict:
    """Every array of the network by a stable name, e.g. ``"E.V"`` or ``"E2I.conn"``, with its
    category: ``state``, ``delays`` (last step's spikes) or ``connectivity``."""
    out = {}
    for name, pop in net.populations.items():
        for var in ("V", "m", "h", "n"):
            out[f"{name}.{var}"] = ("state", _leaf(getattr(pop, var)))
        out[f"{name}.spike"] = ("delays", _leaf(pop.spike))
    for name, proj in net.projections.items():
        post = name[-1]
        out[f"{post}.g_{name[0].lower()}"] = ("state", _leaf(proj.syn.g))  # E2I.syn.g is I.g_e
        comm = proj.comm
        if hasattr(comm, "conn"):
            out[f"{name}.conn"] = ("connectivity", _leaf(comm.conn))
        elif comm.kind == "csr":
            out[f"{name}.indices"] = ("connectivity", jnp.asarray(comm.op.indices))
            out[f"{name}.indptr"] = ("connectivity", jnp.asarray(comm.op.indptr))
    return out


def measured_bytes(net: COBAHH) -> dict:
    """Bytes on the fullest device, by category, read from the arrays' shards."""
    from .shards import bytes_per_device

    out = {}
    for cat in ("state", "delays", "connectivity"):
        arrays = [a for c, a in net_arrays(net).values() if c == cat]
        out[cat] = max(bytes_per_device(*arrays).values()) if arrays else 0
    return out


def compiled_stats(compiled) -> dict:
    """Per-device bytes of a compiled program: arguments, outputs, temporaries, peak, constants.

    ``peak`` is XLA's own simulation of the buffer heap (``peak_memory_in_bytes``, absent in
    old jaxlibs); ``constants`` are the arrays baked into the program text.
    """
    from .hlo import constant_bytes

    m = compiled.memory_analysis()
    if isinstance(m, (list, tuple)):
        m = m[0]
    out = dict(arguments=int(m.argument_size_in_bytes), outputs=int(m.output_size_in_bytes),
               temporaries=int(m.temp_size_in_bytes), aliased=int(m.alias_size_in_bytes))
    out["peak"] = int(getattr(m, "peak_memory_in_bytes", 0) or 0)
    out["constants"] = constant_bytes(compiled)
    return out


def comm_output(net: COBAHH, name: str):
    """One projection's synaptic input for an all-ones spike vector, computed under ``jit``.

    Its sharding says where the work happened: split along ``neuron`` when each device computed
    its own postsynaptic neurons, replicated when every device computed all of them.
    """
    proj = net.projections[name]
    ones = np.ones(proj.comm.shape[0], bool)
    if net.replicated is not None:
        ones = jax.device_put(ones, net.replicated)
    return bm.jit(lambda x: proj.comm(x))(ones)


# -------------------------------------------------------------------------- statistics
def rate_hz(spikes) -> float:
    """Mean firing rate in Hz of a ``[T, n]`` boolean raster sampled every ``DT`` ms."""
    s = np.asarray(spikes)
    return float(s.sum() / s.shape[1] / (s.shape[0] * DT * 1e-3))


def cv_isi(spikes, min_spikes: int = 3) -> float:
    """Mean coefficient of variation of inter-spike intervals over neurons with enough spikes."""
    s = np.asarray(spikes)
    cvs = []
    for col in s.T:
        t = np.flatnonzero(col)
        if t.size >= min_spikes:
            isi = np.diff(t).astype(np.float64)
            cvs.append(isi.std() / isi.mean())
    return float(np.mean(cvs)) if cvs else float("nan")


def population_rate(spikes, bin_ms: float = 1.0) -> np.ndarray:
    """Population rate in Hz, in bins of ``bin_ms``."""
    s = np.asarray(spikes)
    per_bin = max(1, int(round(bin_ms / DT)))
    t = s.shape[0] // per_bin * per_bin
    return s[:t].reshape(-1, per_bin, s.shape[1]).mean(axis=(1, 2)) / (DT * 1e-3)


def source_section(title: str) -> str:
    """The text of one section of this file, from its ``# ---- title`` line to the next one."""
    lines = inspect.getsource(sys.modules[__name__]).splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("# ----")]
    for j, i in enumerate(starts):
        if lines[i].rstrip().endswith(" " + title):
            end = starts[j + 1] if j + 1 < len(starts) else len(lines)
            return "\n".join(lines[i + 1:end]).strip("\n")
    raise KeyError(f"no section {title!r}")


def show_source(obj, title: str | None = None):
    """The source of ``obj`` as a Markdown code block, for reading in a notebook."""
    from IPython.display import Markdown

    text = obj if isinstance(obj, str) else inspect.getsource(obj)
    head = f"**{title}**\n\n" if title else ""
    return Markdown(f"{head}```python\n{text.rstrip()}\n```")


# ---------------------------------------------------------------- the scaling data file
SCHEMA = "shardbook.coba-scaling/1"
DATA_FILE = Path("data") / "coba_scaling.json"  # relative to book/


from .provenance import provenance  # noqa: E402  (re-exported: ci/coba_sweep.py calls coba.provenance)


def device_memory() -> dict:
    """The largest ``peak_bytes_in_use`` and the smallest ``bytes_limit`` over this process's devices,
    from ``device.memory_stats()``; ``{}`` where the platform reports none (CPU)."""
    stats = []
    for d in jax.local_devices():
        try:
            s = d.memory_stats()
        except Exception:
            s = None
        if s:
            stats.append(s)
    out = {}
    peaks = [s["peak_bytes_in_use"] for s in stats if "peak_bytes_in_use" in s]
    limits = [s["bytes_limit"] for s in stats if "bytes_limit" in s]
    if peaks:
        out["peak_bytes_in_use"] = int(max(peaks))
    if limits:
        out["bytes_limit"] = int(min(limits))
    return out


def measure_size(scale: float, sim_ms: float = 1000., chunk_ms: float = 10., time_budget: float = 60.) -> dict:
    """Build, compile and run one size on all devices; what ``ci/coba_sweep.py`` records.

    Runs chunks of ``chunk_ms`` until ``sim_ms`` is simulated or ``time_budget`` seconds of
    steady-state running are spent (at least one chunk always runs).
    """
    devs = jax.devices()
    n_exc, n_inh = sizes(scale)
    steps = int(round(chunk_ms / DT))
    t0 = time.perf_counter()
    net = build(devs, scale=scale)
    jax.block_until_ready([_leaf(v) for v in net.vars().values()])
    build_s = time.perf_counter() - t0
    sim = Simulation(net, record=("count",))
    sim.compile(steps)
    chunks, run_s = 0, 0.0
    while True:
        _, dt = sim.timed_run(steps)
        chunks, run_s = chunks + 1, run_s + dt
        if chunks * chunk_ms >= sim_ms or run_s + dt > time_budget:
            break
    spikes = sum(int(np.asarray(c.value, dtype=np.int64).sum()) for c in sim.counts.values())
    simulated_s = chunks * chunk_ms * 1e-3
    mem = device_memory()
    stats = compiled_stats(sim.compiled[steps])
    return dict(
        scale=scale, neurons=n_exc + n_inh, n_exc=n_exc, n_inh=n_inh, devices=len(devs), conn="index",
        synapses=SYNAPSES_PER_NEURON * (n_exc + n_inh),
        conn_bytes_per_device=measured_bytes(net)["connectivity"],
        predicted_peak_bytes_per_device=int(fit_bytes_per_device(n_exc + n_inh, len(devs))),
        compiled_peak_bytes_per_device=stats["peak"],
        peak_bytes_in_use=mem.get("peak_bytes_in_use"), bytes_limit=mem.get("bytes_limit"),
        build_s=build_s, compile_s=sim.compile_s[steps], steady_s=run_s, simulated_s=simulated_s,
        steady_s_per_sim_s=run_s / simulated_s,
        rate_hz=spikes / (n_exc + n_inh) / simulated_s,
    )


def validate_scaling(data: dict) -> dict:
    """Check a scaling data file's structure; raises ``ValueError`` naming what is missing."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} file (schema={data.get('schema')!r})")
    prov = data.get("provenance", {})
    need = ["device_kind", "device_count", "platform", "simulated", "versions", "date", "command"]
    missing = [k for k in need if k not in prov]
    for pkg in ("jax", "jaxlib", "brainpy", "brainstate", "brainevent"):
        if pkg not in prov.get("versions", {}):
            missing.append(f"versions.{pkg}")
    run_keys = ["neurons", "devices", "conn_bytes_per_device", "peak_bytes_in_use", "compile_s",
                "steady_s_per_sim_s", "rate_hz"]
    for i, run in enumerate(data.get("runs", [])):
        missing += [f"runs[{i}].{k}" for k in run_keys if k not in run]
    if missing:
        raise ValueError("scaling data file lacks: " + ", ".join(missing))
    return data


def load_scaling(path) -> dict | None:
    """The scaling data file at ``path``, validated; ``None`` if there is no such file."""
    path = Path(path)
    if not path.exists():
        return None
    with open(path) as f:
        return validate_scaling(json.load(f))


def plot_scaling(data: dict, axes=None):
    """Steady-state time per simulated second and peak memory per device against neurons."""
    import matplotlib.pyplot as plt

    runs = sorted(data["runs"], key=lambda r: r["neurons"])
    prov = data["provenance"]
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    n = [r["neurons"] for r in runs]
    axes[0].loglog(n, [r["steady_s_per_sim_s"] for r in runs], "o-", label="steady state")
    axes[0].loglog(n, [r["compile_s"] for r in runs], "s--", label="compilation (once)")
    axes[0].set_ylabel("seconds per simulated second")
    axes[0].legend(fontsize=8)
    peak = [r["peak_bytes_in_use"] for r in runs]
    if all(p is not None for p in peak):
        axes[1].loglog(n, peak, "o-", label="measured peak (memory_stats)")
    axes[1].loglog(n, [r["predicted_peak_bytes_per_device"] for r in runs], "--", label="ledger prediction")
    axes[1].set_ylabel("bytes per device")
    axes[1].legend(fontsize=8)
    what = f"{prov['device_count']} x {prov['device_kind']}" + (" (simulated CPU)" if prov["simulated"] else "")
    for ax in axes:
        ax.set_xlabel("neurons")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(what, fontsize=9)
    return axes


# ----------------------------------------------------------------------------- helpers
_COMPILED: dict = {}


def _compiled(fn, key, sharding, static):
    """``jax.jit(fn, out_shardings=sharding)`` lowered and compiled once per shapes and shardings."""
    cache_key = (fn, static, tuple(sorted(sharding.items())) if isinstance(sharding, dict) else sharding,
                 jnp.shape(key), jnp.result_type(key), getattr(key, "sharding", None))
    if cache_key not in _COMPILED:
        with _partitionable():
            jitted = jax.jit(fn, static_argnums=tuple(range(1, 1 + len(static))), out_shardings=sharding)
            lowered = jitted.lower(key, *static)
        # A generator runs once per network: on CPU, skipping LLVM's optimisations halves its compile time.
        _COMPILED[cache_key] = (lowered.compile({"xla_backend_optimization_level": 0})
                                if jax.default_backend() == "cpu" else lowered.compile())
    return _COMPILED[cache_key]


def _partitionable():
    ctx = getattr(jax, "threefry_partitionable", None)  # a context manager in JAX >= 0.4.3x
    return ctx(True) if ctx is not None else contextlib.nullcontext()


def _zeros_of(key, n, dtype):
    return jnp.zeros((n,), dtype)
