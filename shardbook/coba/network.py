"""The COBA-HH network (Brette et al. 2007, benchmark 3) in BrainPy, and ``build``.

Anchors: BrainPy's ``ei_nets/Brette_2007_COBAHH.py`` and the BrainPy eLife paper's
``figure8B/COBAHH-TPU.py`` (a fixed in-degree index matrix).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import brainpy as bp
import brainpy.math as bm

from .events import EventCSR, check_int32
from .parameters import (
    DEFAULT_CONN,
    DT,
    EK,
    GRAPHS,
    K_EXC,
    K_INH,
    KICK_FROM,
    KICK_NEURONS,
    KICK_RATE,
    KICK_TO,
    NEURON,
    P_CONN,
    REPRESENTATIONS,
    STARTS,
    VT,
    Cm,
    Ee,
    Ei,
    El,
    ENa,
    V_th,
    g_Kd,
    g_Na,
    gl,
    nest_initial_gates,
    sizes as _sizes,  # COBAHH names its argument sizes
    taue,
    taui,
    we,
    wi,
)
from .peer import BrainEventCSR
from .push import SPIKE_CAPACITY, PushCSR, SpikeExchange, check as check_delivery
from .randomness import (
    _full_of,
    bernoulli_k_max,
    bernoulli_sources,
    random_state,
    random_state_axes,
    replicated_any,
    sharded_random,
    zeros_variable as _zeros,
)

__all__ = ["HH", "FixedInDegree", "COBAHH", "build"]


class HH(bp.dyn.NeuDyn):
    """Hodgkin-Huxley neurons (Traub-Miles kinetics), all state split on ``neuron``."""

    def __init__(self, V0, method="exp_auto"):
        super().__init__(V0.shape[0], sharding=[NEURON], method=method)
        n = self.num
        self.V = bm.Variable(V0)  # already split: made by random_state
        self.m, self.h, self.n = _zeros(n), _zeros(n), _zeros(n)
        self.spike = _zeros(n, bool)
        self.integral = bp.odeint(
            bp.JointEq(self.dV, self.dm, self.dh, self.dn), method=method
        )

    def dV(self, V, t, m, h, n):
        I_syn = self.sum_current_inputs(V)  # the COBA synapses: g * (E - V)
        g_na = g_Na * (m * m * m) * h
        g_kd = g_Kd * (n * n * n * n)
        return (-gl * (V - El) - g_na * (V - ENa) - g_kd * (V - EK) + I_syn) / Cm

    # x / (exp(x) - 1) is 0/0 at x = 0; 1 / exprel(x) is the same function without
    # the hole, so float32 stays finite over long runs.
    def dm(self, m, t, V):
        # 0.32 (13 - V + VT) / (exp(...) - 1) and 0.28 (V - VT - 40) / (exp(...) - 1):
        alpha = 1.28 / bm.exprel((13. - V + VT) / 4.)
        beta = 1.4 / bm.exprel((V - VT - 40.) / 5.)
        return alpha * (1. - m) - beta * m

    def dh(self, h, t, V):
        alpha = 0.128 * bm.exp((17. - V + VT) / 18.)
        beta = 4. / (1. + bm.exp(-(V - VT - 40.) / 5.))
        return alpha * (1. - h) - beta * h

    def dn(self, n, t, V):
        # 0.032 (15 - V + VT) / (exp(...) - 1)
        alpha = 0.16 / bm.exprel((15. - V + VT) / 5.)
        beta = 0.5 * bm.exp((10. - V + VT) / 40.)
        return alpha * (1. - n) - beta * n

    def update(self):
        V, m, h, n = self.integral(self.V.value, self.m.value, self.h.value,
                                   self.n.value, bp.share["t"], dt=bp.share["dt"])
        self.spike.value = jnp.logical_and(self.V.value < V_th, V >= V_th)
        self.V.value, self.m.value, self.h.value, self.n.value = V, m, h, n
        return self.spike.value




class FixedInDegree(bp.dnn.Layer):
    """Each postsynaptic neuron's sources, given as a ``[k, n_post]`` matrix.

    ``kind``: ``"index"`` (that int32 matrix, split along post), ``"mask"`` (a dense
    ``[n_pre, n_post]`` uint8 count), ``"csr"`` (BrainPy's ``EventCSRLinear``, held
    whole), ``"jit"`` (BrainPy's ``EventJitFPHomoLinear``: a new graph of probability
    k / n_pre every step), ``"event"`` (:class:`EventCSR`), ``"push"``
    (:class:`PushCSR`: ``update`` takes the gathered spike indices) or ``"brainevent"``
    (CPU only).
    ``as_variable=False`` keeps the index or mask as a plain attribute: the trap.
    Sources equal to ``n_pre`` are padding (a Bernoulli graph's shorter columns).
    """

    def __init__(self, sources, n_pre, weight, kind="index", as_variable=True, seed=0,
                 padded=False, rows=None, spike_capacity=SPIKE_CAPACITY, kernel="auto"):
        """A projection's synapses as ``kind`` stores them, split over the devices;
        ``ValueError`` for a ``kind`` that cannot hold this graph.

        Long because: one short branch per stored form, the forms chapter 4 compares."""
        super().__init__()
        push = dict(fraction=spike_capacity, kernel=kernel)
        # (n_post, k, key): an event CSR drawn by row in each block
        if rows is not None:
            if kind not in ("event", "push"):
                raise ValueError(
                    "a graph drawn by row in each block is stored as 'event' or 'push'"
                )
            self.kind, self.weight, self.shape, self.padded = (
                kind,
                weight,
                (n_pre, rows[0]),
                False,
            )
            split = bm.sharding.get_sharding([NEURON])
            mesh = None if split is None else split.mesh
            if kind == "push":
                self.op = PushCSR(None, n_pre, weight, mesh, rows=rows, **push)
            else:
                self.op = EventCSR(None, n_pre, weight, mesh, rows=rows)
            return
        if kind not in REPRESENTATIONS:
            raise ValueError(f"kind must be one of {REPRESENTATIONS}, not {kind!r}")
        if padded and kind not in ("index", "event", "push", "brainevent"):
            raise ValueError(
                f"a Bernoulli graph is stored as 'index', 'event' or 'push', "
                f"not {kind!r}"
            )
        k, n_post = sources.shape
        self.kind, self.weight, self.shape, self.padded = (
            kind,
            weight,
            (n_pre, n_post),
            padded,
        )
        if kind == "jit":
            self.op = bp.dnn.EventJitFPHomoLinear(n_pre, n_post, prob=k / n_pre,
                                                  weight=weight, seed=seed)
            return
        if kind == "csr":  # BrainPy's layer needs the whole, concrete graph
            whole = _gather(sources)
            self.op = bp.dnn.EventCSRLinear(_csr_conn(whole, n_pre, n_post), weight)
            return
        if kind in ("event", "push", "brainevent"):
            split = bm.sharding.get_sharding([NEURON])
            mesh = None if split is None else split.mesh
            if kind == "push":
                self.op = PushCSR(sources, n_pre, weight, mesh, **push)
            else:
                cls = BrainEventCSR if kind == "brainevent" else EventCSR
                self.op = cls(sources, n_pre, weight, mesh)
            return
        if kind == "mask":  # each device counts the sources of its own columns
            sources = sharded_random(_count_sources, sources, [None, NEURON], n_pre)
        # A Variable is an argument of the compiled step and keeps its sharding.
        # A plain attribute is a closure constant: baked whole into every device's
        # program.
        self.conn = bm.Variable(sources) if as_variable else sources

    def update(self, spikes):  # spikes: bool[n_pre], the same on every device
        if self.kind in ("csr", "jit", "event", "push", "brainevent"):  # push: indices
            return self.op(spikes)
        conn = self.conn.value if isinstance(self.conn, bm.Variable) else self.conn
        if self.kind == "index":
            if self.padded:  # a Bernoulli graph: source n_pre never spikes
                got = spikes.at[conn].get(mode="fill", fill_value=False)
            else:
                got = spikes[conn]
            count = jnp.sum(got, axis=0, dtype=jnp.float32)
        else:
            count = jnp.sum(jnp.where(spikes[:, None], conn, jnp.uint8(0)), axis=0,
                            dtype=jnp.float32)
        return count * self.weight  # an integer count times the weight: exact


def _gather(x) -> np.ndarray:
    """A global array, whole, here; across processes an all-gather all must call."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


# column j of the result: how often each source feeds j
def _count_sources(sources, n_pre):
    def column(col):
        return jnp.zeros((n_pre,), jnp.uint8).at[col].add(1)
    return jax.vmap(column, in_axes=1, out_axes=1)(sources)


def _csr_conn(sources: np.ndarray, n_pre: int, n_post: int):
    """A ``[k, n_post]`` source matrix as BrainPy's CSR connector (pre -> post)."""
    k = sources.shape[0]
    check_int32(k * n_post, "synapses of one projection")   # BrainPy's int32 CSR
    pre = sources.T.reshape(-1)
    post = np.repeat(np.arange(n_post, dtype=np.int32), k)
    order = np.argsort(pre, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(pre, minlength=n_pre))])
    return bp.conn.CSRConn(post[order].astype(np.int32), indptr.astype(np.int32))(
        n_pre, n_post
    )


class COBAHH(bp.DynSysGroup):
    """COBA-HH: E and I populations, four projections, split along ``neuron``.

    Build it in ``bm.sharding.device_mesh(devices, [NEURON])`` or with :func:`build`.
    ``conn``: :class:`FixedInDegree`'s ``kind``; ``None`` is ``DEFAULT_CONN``, or
    ``"index"`` with ``as_variable=False`` or ``layout="sliced"`` (the trap: one
    population sliced into E and I).  ``graph``: ``"fixed"`` in-degree ``k`` (drawn
    with replacement), ``"bernoulli"`` (p = 0.02) or ``"rows"`` (mean in-degree ``k``,
    drawn per device block for ``"event"`` or ``"push"``: depends on the device count).
    ``start``: ``"rest"`` (V random, g zero), ``"random"`` (V and g random: Brian 2) or
    ``"kick"`` (NEST: all at E_L, a Poisson kick into 50 E neurons).  ``sizes``:
    (n_exc, n_inh) instead of ``scale``; ``weights``: (we, wi) in nS;
    ``spike_capacity``, ``kernel``: see :mod:`shardbook.coba.push`; ``dt`` in ms.
    ``config`` holds every argument (for :func:`build` to remake it); ``devices``, the
    mesh size.
    """

    def __init__(
        self,
        scale=1,
        conn=None,
        as_variable=True,
        layout="separate",
        seed=0,
        graph="fixed",
        start="rest",
        k=(K_EXC, K_INH),
        sizes=None,
        weights=None,
        spike_capacity=SPIKE_CAPACITY,
        kernel="auto",
        dt=DT,
    ):
        """The benchmark network at ``scale``; ``ValueError`` for a bad option,
        ``RuntimeError`` if a Bernoulli in-degree overflows its matrix.

        Long because: built in the benchmark's order (populations, start, graph,
        projections, kick), with every argument checked here, once."""
        if conn is None:
            conn = DEFAULT_CONN if as_variable and layout == "separate" else "index"
        config = _config(dict(locals()))  # every argument, before anything else
        super().__init__()
        self.config = config
        self.dt = float(dt)
        bm.set_dt(self.dt)
        if graph not in GRAPHS or start not in STARTS:
            raise ValueError(f"graph must be one of {GRAPHS} and start one of {STARTS}")
        self.n_exc, self.n_inh = sizes if sizes is not None else _sizes(scale)
        self.conn_kind, self.layout, self.seed = conn, layout, seed
        self.graph, self.start = graph, start
        split = bm.sharding.get_sharding([NEURON])  # None when there is no mesh
        self.mesh = None if split is None else split.mesh
        self.replicated = (
            None
            if split is None
            else jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())
        )
        self.split = split
        self.devices = 1 if self.mesh is None else int(self.mesh.shape[NEURON])
        k_exc, k_inh = k
        w_exc, w_inh = (we, wi) if weights is None else weights
        if layout == "separate":
            pops = (("E", self.n_exc), ("I", self.n_inh))
            plan = (("E2E", "E", "E", k_exc, w_exc, taue, Ee),
                    ("E2I", "E", "I", k_exc, w_exc, taue, Ee),
                    ("I2E", "I", "E", k_inh, w_inh, taui, Ei),
                    ("I2I", "I", "I", k_inh, w_inh, taui, Ei))
        elif layout == "sliced":
            pops = (("N", self.n_exc + self.n_inh),)
            plan = (("E2N", "E", "N", k_exc, w_exc, taue, Ee),
                    ("I2N", "I", "N", k_inh, w_inh, taui, Ei))
        else:
            raise ValueError(f"layout must be 'separate' or 'sliced', not {layout!r}")
        size = dict(pops, E=self.n_exc, I=self.n_inh)
        key = jax.random.PRNGKey(seed)
        projs = tuple(
            (name, k, size[pre], size[post]) for name, pre, post, k, *_ in plan
        )
        if graph == "rows" and conn not in ("event", "push"):
            raise ValueError(
                "graph='rows' is drawn straight into the 'event' or 'push' "
                "representation"
            )
        if conn == "push" and layout != "separate":
            raise ValueError("the push delivery gathers each population's spikes: "
                             "layout='separate'")
        projs_fixed = projs if graph == "fixed" else ()  # the others are drawn below
        axes = random_state_axes(pops, projs_fixed, start)
        init = sharded_random(random_state, key, axes, pops, projs_fixed, start)
        if graph == "bernoulli":
            for i, (name, _, n_pre, n_post) in enumerate(projs, start=100):
                k_max = bernoulli_k_max(n_pre, P_CONN)
                init[name] = sharded_random(
                    bernoulli_sources,
                    jax.random.fold_in(key, i),
                    [None, NEURON],
                    n_pre,
                    n_post,
                    P_CONN,
                    k_max,
                )
                # a column overflowed? (a replicated reduction: every process reads it)
                if replicated_any(init[name][-1] < n_pre, self.replicated):
                    raise RuntimeError(
                        f"{name}: an in-degree reached {k_max}; raise k_max"
                    )

        for name, _ in pops:
            setattr(self, name, HH(init[f"{name}.V"]))
        push = dict(spike_capacity=spike_capacity, kernel=kernel)
        if conn == "push":  # each population's spikes leave as indices (coba.push)
            self.exchange_E = SpikeExchange(
                self.n_exc, self.mesh, spike_capacity, kernel
            )
            self.exchange_I = SpikeExchange(
                self.n_inh, self.mesh, spike_capacity, kernel
            )
        for i, (name, pre, post, k, w, tau, E) in enumerate(plan):
            target = getattr(self, post)
            if graph == "rows":
                rows = (size[post], k, jax.random.fold_in(key, 100 + i))
                comm = FixedInDegree(None, size[pre], w, conn, rows=rows, **push)
            else:
                comm = FixedInDegree(init[name], size[pre], w, conn, as_variable,
                                     seed=1000 * seed + i, padded=graph == "bernoulli",
                                     **push)
            setattr(
                self,
                name,
                bp.dyn.HalfProjAlignPostMg(
                    comm=comm,
                    syn=bp.dyn.Expon.desc(target.num, tau=tau, sharding=[NEURON]),
                    out=bp.dyn.COBA.desc(E=E),
                    post=target,
                ),
            )
            if start == "random":
                g = getattr(self, name).syn.g
                g.value = init[f"{post}.g{pre.lower()}"]
        if start == "kick":
            self._nest_start(key)
        # E -> E: its synapse holds g_e of the E neurons, which NEST's kick raises
        self.kicked = plan[0][0] if start == "kick" else None

    def _nest_start(self, key):
        """NEST's start: every neuron at E_L with NEST's initial gates, no g."""
        for pop in self.populations.values():
            for var, value in zip(("V", "m", "h", "n"), (El, *nest_initial_gates())):
                getattr(pop, var).value = sharded_random(_full_of, key, [NEURON],
                                                         pop.num, float(value))
        self.kick_key = jax.random.fold_in(key, 300)

    def kick(self, i):
        """Step ``i``'s g_e jumps (nS) of NEST's kick, for every E neuron: each of the
        first 50 gets its own 300 Hz Poisson train while 1 ms <= t < 51 ms, drawn by
        inverting the CDF (six terms: more events have p < 1e-10), alike on all devices.
        """
        lam = KICK_RATE * self.dt * 1e-3
        cdf = np.cumsum([np.exp(-lam) * lam ** j / np.prod(np.arange(1, j + 1))
                         for j in range(6)])
        u = jax.random.uniform(jax.random.fold_in(self.kick_key, i), (KICK_NEURONS,))
        events = jnp.sum(u[:, None] > jnp.asarray(cdf, jnp.float32)[None, :], axis=1)
        first, stop = (int(np.ceil(t / self.dt - 1e-6)) for t in (KICK_FROM, KICK_TO))
        on = jnp.logical_and(i >= first, i < stop)
        jumps = jnp.where(on, events, 0).astype(jnp.float32) * we
        target = self.projections[self.kicked].refs["syn"].g
        full = jnp.pad(jumps, (0, target.shape[0] - KICK_NEURONS))
        if self.split is not None:
            full = jax.lax.with_sharding_constraint(full, self.split)
        return full

    def everyone(self, spikes, pop=None):
        """Every device needs every presynaptic spike: one all-gather per population
        (of the bool vector; with ``conn="push"``, of the spiking neurons' indices)."""
        if pop is not None and self.exchanges:
            return self.exchanges[pop](spikes)
        if self.replicated is None:
            return spikes
        return jax.lax.with_sharding_constraint(spikes, self.replicated)

    @property
    def exchanges(self) -> dict:
        """The push delivery's :class:`SpikeExchange` per population (else empty)."""
        if self.conn_kind != "push":
            return {}
        return {"E": self.exchange_E, "I": self.exchange_I}

    def after_chunk(self):
        """``Simulation.run`` calls it per chunk: raises if push dropped input."""
        if self.conn_kind == "push":
            check_delivery(self)

    def update(self):
        if self.kicked is not None:  # NEST's start: an outside kick into g_e
            syn = self.projections[self.kicked].refs["syn"]
            syn.add_current(self.kick(bp.share["i"]))
        if self.layout == "separate":
            e = self.everyone(self.E.spike.value, "E")
            i = self.everyone(self.I.spike.value, "I")
            self.E2E(e), self.E2I(e), self.I2E(i), self.I2I(i)
            return {"E": self.E(), "I": self.I()}
        s = self.N.spike.value  # slicing a split vector moves E/I between devices
        self.E2N(self.everyone(s[:self.n_exc])), self.I2N(self.everyone(s[self.n_exc:]))
        return {"N": self.N()}

    @property
    def populations(self) -> dict:
        if self.layout == "separate":
            return {"E": self.E, "I": self.I}
        return {"N": self.N}

    @property
    def projections(self) -> dict:
        names = (
            ("E2E", "E2I", "I2E", "I2I")
            if self.layout == "separate"
            else ("E2N", "I2N")
        )
        return {n: getattr(self, n) for n in names}


def _config(args: dict) -> dict:
    """The constructor's arguments as JSON-able values (tuples become lists)."""
    args.pop("self", None)
    args.pop("__class__", None)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in args.items()}


# region: coba.build
def build(devices=None, **kwargs) -> COBAHH:
    """:class:`COBAHH` on a 1-D ``neuron`` mesh over ``devices`` (``None``: no mesh)."""
    if devices is None:
        return COBAHH(**kwargs)
    with bm.sharding.device_mesh(np.asarray(devices), [NEURON]):
        return COBAHH(**kwargs)
# endregion
