"""The book's sharded steps, built for any mesh: what ``shardbook.gputarget`` compiles.

Each builder takes a :class:`shardbook.gputarget.Target` and returns ``(jitted, args)``: a
plain ``jax.jit`` function and its arguments as ``jax.ShapeDtypeStruct``\\ s on the target's
mesh.  The models are the chapters' own (``shardbook.models``, ``shardbook.coba``), at the
chapters' sizes.  They are built on devices that can hold arrays (the compile child's
simulated CPU devices, or the notebook's own devices), in a mesh of the same shape and axis
names as the target's.  Shardings that a model keeps as attributes (``RNN._state_sharding``,
``COBAHH.replicated``) are pointed at the target mesh before the step is traced.

Every builder works for any device count whose mesh the sizes divide (840 = lcm(1..8)).
Import this module only after :func:`shardbook.setup_devices` (it imports BrainPy).
"""
from __future__ import annotations

import warnings
from math import gcd

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import brainpy.math as bm

from .devices import mesh_shape_2d

__all__ = ["rnn_data_parallel", "rnn_hidden", "fsdp_mlp", "coba_hh", "tiny_data_parallel",
           "CH2", "CH3", "FSDP", "check_data_parallel_gpu", "check_data_parallel_cpu",
           "check_rnn_hidden_gpu", "check_rnn_hidden_cpu", "check_coba_gpu", "check_coba_cpu",
           "check_fsdp_gpu", "check_fsdp_cpu", "rnn_grad_bytes"]

CH2 = dict(B=840, T=50, I=4, H=32, O=2, lr=1e-2)   # chapter 2: batch, time, in, hidden, out
CH3 = dict(B=8, T=20, I=8, H=840, O=8, lr=1e-3)    # chapter 3 (sections 1, 5 and 7)
FSDP = dict(B=840, D=1680, layers=3)               # a small MLP, parameters split over 'batch'


def rnn_grad_bytes(I, H, O, hidden_shards: int = 1, loss: bool = True) -> int:
    """Bytes of the RNN's weight gradients on one device (plus the 4-byte loss)."""
    return 4 * (I + H + O) * H // hidden_shards + (4 if loss else 0)


def _retarget_state(model, target):
    """Point the RNN's remembered state sharding at the target mesh (reset_state uses it)."""
    if model._state_sharding is not None:
        model._state_sharding = target.sharding(model._state_sharding.spec)


def rnn_data_parallel(target, B=CH2["B"], T=CH2["T"], I=CH2["I"], H=CH2["H"], O=CH2["O"], lr=CH2["lr"],
                      batch_sharded: bool = True):
    """Chapter 2: the RNN training step with the batch split over ``'batch'``.

    ``batch_sharded=False`` removes the annotation: the model is built without axis names
    (``annotate="none"``) and the data are replicated, so nothing is split.
    """
    from .models import RNN, make_train_step

    target.mesh((target.n,), ("batch",))
    with bm.sharding.device_mesh(target.build_devices(), ["batch"]):
        model = RNN(I, H, O, B, annotate="all" if batch_sharded else "none")
    step = make_train_step(model, lr=lr)
    _retarget_state(model, target)
    spec = P("batch") if batch_sharded else P()
    xs = target.struct((B, T, I), jnp.float32, spec)
    ys = target.struct((B, T, O), jnp.float32, spec)
    return target.bm_step(step, xs, ys)


def rnn_hidden(target, two_d: bool = False, B=CH3["B"], T=CH3["T"], I=CH3["I"], H=CH3["H"], O=CH3["O"],
               lr=CH3["lr"]):
    """Chapter 3: the hidden axis split over ``'hidden'`` (1-D), or ``('batch', 'hidden')``
    with ``mesh_shape_2d(n)`` (2-D).  The data are split by ``'batch'`` where the mesh has it."""
    from .models import RNN, make_train_step

    shape, names = ((mesh_shape_2d(target.n), ("batch", "hidden")) if two_d else ((target.n,), ("hidden",)))
    target.mesh(shape, names)
    with bm.sharding.device_mesh(target.build_devices(shape), list(names)):
        model = RNN(I, H, O, B)
    step = make_train_step(model, lr=lr)
    _retarget_state(model, target)
    spec = P("batch") if two_d else P()
    xs = target.struct((B, T, I), jnp.float32, spec)
    ys = target.struct((B, T, O), jnp.float32, spec)
    return target.bm_step(step, xs, ys)


def fsdp_mlp(target, B=FSDP["B"], D=FSDP["D"], layers=FSDP["layers"], lr=1e-2, params_sharded: bool = True):
    """Fully sharded data parallelism in plain JAX: the batch AND every weight matrix split
    over ``'batch'`` (rows), each weight all-gathered just before its layer uses it.

    ``params_sharded=False`` keeps the weights replicated: plain data parallelism.
    """
    target.mesh((target.n,), ("batch",))
    wspec = P("batch", None) if params_sharded else P()
    full = target.sharding(P())

    def loss(params, x):
        h = x
        for w in params:
            if params_sharded:  # gather the whole matrix where it is used: the FSDP all-gather
                w = jax.lax.with_sharding_constraint(w, full)
            h = jnp.tanh(h @ w)
        return jnp.mean(h ** 2)

    def step(params, x):
        g = jax.grad(loss)(params, x)
        return [w - lr * gw for w, gw in zip(params, g)]

    out = [target.sharding(wspec)] * layers
    params = [target.struct((D, D), jnp.float32, wspec) for _ in range(layers)]
    x = target.struct((B, D), jnp.float32, P("batch"))
    return jax.jit(step, out_shardings=out), (params, x)


def tiny_data_parallel(target, B=64, D=32, batch_sharded: bool = True):
    """The smallest data-parallel step: two weight matrices, replicated; a batch split over
    ``'batch'`` (or replicated, with ``batch_sharded=False``).  For the tests."""
    target.mesh((target.n,), ("batch",))

    def step(ws, x):
        def loss(ws):
            return jnp.mean(jnp.tanh(x @ ws[0]) @ ws[1])
        g = jax.grad(loss)(ws)
        return [w - 0.1 * gw for w, gw in zip(ws, g)]

    ws = [target.struct((D, D), jnp.float32, P()) for _ in range(2)]
    x = target.struct((B, D), jnp.float32, P("batch") if batch_sharded else P())
    return jax.jit(step), (ws, x)


# COBA-HH: resized compiles build the network at this small scale and trace it at the size asked
# for. 672 E + 168 I: both divide by 1..8 and neither equals an in-degree (64, 16) or a step count.
_SMALL_SCALE = 0.2


def coba_hh(target, scale: float = 1, steps: int = 100, record=("count",), neurons: int | None = None,
            gather: bool = True, conn: str = "index", kernel: str = "auto",
            spike_capacity: float | None = None):
    """Chapter 4: the COBA-HH loop (``coba.Simulation``), ``steps`` steps, split over ``'neuron'``.

    ``neurons`` (a multiple of 4200, 80 % E): compile for that size without building it.  The
    network is built at a small scale and each state is traced at the size asked for, through a
    zero-memory stand-in (:meth:`Target.bm_step`'s ``resize``); every shape in the step comes
    from the state, so the program is the one the full network compiles to
    (``tests/test_gputarget.py`` checks that at 4200 neurons).
    ``gather=False`` removes the annotation that makes every device see every spike
    (``COBAHH.replicated`` set to ``None``).
    ``conn``: the delivery (``"index"``, ``"event"``, ``"push"``); for the CSR deliveries the
    per-device sizes their code keeps (buffer capacities, block sizes) are recomputed at the
    size asked for (:func:`_resize_deliveries`).
    """
    from . import coba

    mesh = target.mesh((target.n,), (coba.NEURON,))
    # the least multiple of the small scale that every device count splits (840 s / n)
    small_scale = _SMALL_SCALE * (target.n // gcd(840, target.n))
    build_scale = small_scale if neurons is not None else scale
    extra = {} if spike_capacity is None else dict(spike_capacity=spike_capacity)
    net = coba.build(target.build_devices(), scale=build_scale, conn=conn, kernel=kernel,
                     **extra)
    net.mesh = mesh
    net.replicated = NamedSharding(mesh, P()) if gather else None
    for obj in _delivery_objects(net):
        obj.mesh = mesh
    sim = coba.Simulation(net, record=record)
    idx = target.struct((steps,), jnp.int32, P())
    if neurons is None:
        return target.bm_step(sim.loop, idx)
    if neurons % 4200:
        raise ValueError(f"neurons must be a multiple of 4200, got {neurons}")
    small = coba.sizes(small_scale)
    big = coba.sizes(neurons / 4200)
    size_map = dict(zip(small, big))
    shapes, apply_sizes = _resize_deliveries(net, small, big, target.n)
    size_map.update(shapes)
    applied = []

    def resize(shape):  # called per state, after the states were found at the small size
        if not applied:
            apply_sizes()  # the deliveries' static sizes, for the trace at size
            applied.append(True)
        return tuple(size_map.get(d, d) for d in shape)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return target.bm_step(sim.loop, idx, resize=resize)


def _delivery_objects(net):
    """The network's CSR delivery objects (``EventCSR`` and its kinds, the exchanges)."""
    from .coba.events import EventCSR

    out = list(net.exchanges.values())
    out += [p.comm.op for p in net.projections.values()
            if isinstance(getattr(p.comm, "op", None), EventCSR)]
    return out


def _resize_deliveries(net, small, big, devices: int):
    """The CSR deliveries' arrays and static sizes from ``small`` to ``big`` (E, I)
    neurons: ``(shape map of their arrays, a function that sets their static sizes)``.

    Raises if two arrays of different meaning share a dimension at the small size (the
    map could not tell them apart).
    """
    from .coba import push
    from .coba.events import EventCSR, chunk_size

    big_of = dict(zip(small, big))
    out, todo = {}, []

    def put(old, new):
        if out.get(old, new) != new or (old in big_of and big_of[old] != new):
            raise ValueError(f"dimension {old} means two things at the small size")
        out[old] = new

    for x in net.exchanges.values():
        n = big_of[x.n]
        todo.append((x, dict(n=n, n_local=n // devices,
                             capacity=push.spike_capacity(n // devices, x.fraction))))
    for proj in net.projections.values():
        op = getattr(proj.comm, "op", None)
        if not isinstance(op, EventCSR):
            continue
        n_pre, n_post = big_of[op.n_pre], big_of[op.n_post]
        k = op.indices.value.shape[0] // op.n_post
        put(devices * (op.n_pre + 1), devices * (n_pre + 1))   # row pointers
        put(k * op.n_post, k * n_post)                          # synapses (fixed graph)
        n_local = n_post // devices
        sizes = dict(n_pre=n_pre, n_post=n_post, n_local=n_local,
                     chunk=chunk_size(k * n_local))
        if isinstance(op, push.PushCSR):
            slots = devices * push.spike_capacity(n_pre // devices, op.fraction)
            sizes.update(mean_degree=k * n_local / n_pre, slots=slots,
                         events=push.event_capacity(slots, k * n_local / n_pre))
        todo.append((op, sizes))

    def apply():
        for obj, sizes in todo:
            for key, value in sizes.items():
                setattr(obj, key, value)
    return out, apply


# ------------------------------------------------------------------ the patterns, per compiler
# Each check takes a report (``gputarget.report``, ``compile_for``, ``compile_here``) and raises
# AssertionError with the collectives it saw when the program is not the one described.  The
# GPU patterns are what XLA's GPU compiler makes of the book's steps (measured for H100 and H200
# targets); the CPU patterns are what the chapters measure on simulated CPU devices.
ALL_GATHER_COMBINE_BYTES = 30 * 2**20  # XLA:GPU's default all-gather combine threshold (30 MiB)


def _rows(rep):
    return [(c["op"], c["async"], c["loop"], c["backward"], tuple(c["shapes"]), c["nbytes"])
            for c in rep["collectives"]]


def _f32(*dims):
    return f"f32[{','.join(map(str, dims))}]"


def check_data_parallel_gpu(rep, grad_bytes: int):
    """XLA:GPU: ONE asynchronous all-reduce of all gradients (plus the loss, if any) over one flat
    buffer, once per training step, and no other collective."""
    cs = rep["collectives"]
    assert len(cs) == 1, f"expected one collective, got {_rows(rep)}"
    c = cs[0]
    assert c["op"] == "all-reduce" and c["async"] and c["loop"] is None, _rows(rep)
    assert len(c["shapes"]) == 1 and c["nbytes"] == grad_bytes, (grad_bytes, _rows(rep))


def check_data_parallel_cpu(rep, grad_bytes: int, loop: bool = True):
    """XLA:CPU (chapter 2): one synchronous tuple all-reduce of the weight gradients, inside the
    backward time loop when the step has one, plus a 4-byte all-reduce of the loss."""
    grads = [c for c in rep["collectives"] if c["nbytes"] == grad_bytes]
    assert len(grads) == 1 and grads[0]["op"] == "all-reduce" and not grads[0]["async"], _rows(rep)
    assert grads[0]["per_step"] == loop, _rows(rep)
    assert len(grads[0]["shapes"]) > 1, "a tuple of gradients, not one flat buffer"


def check_rnn_hidden_gpu(rep, B, T, H, O, n_hidden: int, n_batch: int = 1, grad_bytes: int | None = None):
    """XLA:GPU, hidden axis split ``n_hidden`` ways (chapter 3):

    * forward loop: one async all-gather of the state, ``f32[B/b, H]``; the output all-reduce is
      NOT there (while-loop all-reduce code motion moved it after the loop: one all-reduce of
      all ``T`` outputs, ``f32[T, B/b, O]``);
    * backward loop: one async all-gather of the state and one async reduce-scatter whose result
      is ``f32[B/b, H/h]`` (reduce-scatter creation; the CPU all-reduces ``f32[B/b, H]``);
    * with a batch axis (``n_batch > 1``): one all-reduce of the hidden-split gradients, once per
      step, after the loop.
    """
    b = B // n_batch
    got = sorted((c["op"], c["loop"] is not None and ("bwd" if c["backward"] else "fwd") or "once",
                  " ".join(c["shapes"])) for c in rep["collectives"])
    want = [("all-gather", "bwd", _f32(b, H)), ("all-gather", "fwd", _f32(b, H)),
            ("all-reduce", "once", _f32(T, b, O)), ("reduce-scatter", "bwd", _f32(b, H // n_hidden))]
    if n_batch > 1:
        want.append(("all-reduce", "once", f"f32[{grad_bytes // 4}]"))
    assert got == sorted(want), (sorted(want), got)
    assert all(c["async"] for c in rep["collectives"]), "every GPU collective is asynchronous"


def check_rnn_hidden_cpu(rep, B, H, O, n_hidden: int, n_batch: int = 1):
    """XLA:CPU (chapter 3, sections 5 and 7): per forward step an all-gather of the state and an
    all-reduce of the output; per backward step an all-gather and an all-reduce of the state;
    with a batch axis, also the gradient all-reduce inside the backward loop."""
    b = B // n_batch
    got = {(c["op"], "bwd" if c["backward"] else "fwd", " ".join(c["shapes"]))
           for c in rep["collectives"] if c["loop"] is not None}
    for want in [("all-gather", "fwd", _f32(b, H)), ("all-reduce", "fwd", _f32(b, O)),
                 ("all-gather", "bwd", _f32(b, H)), ("all-reduce", "bwd", _f32(b, H))]:
        assert want in got, (want, sorted(got))
    assert not any(c["async"] for c in rep["collectives"])


def check_coba_gpu(rep, n_exc: int, n_inh: int):
    """XLA:GPU (chapter 4): per step, the E and I spikes all-gathered asynchronously; below the
    all-gather combiner's threshold (30 MiB) as ONE combined all-gather; nothing else."""
    cs = rep["collectives"]
    assert cs and all(c["op"] == "all-gather" and c["async"] and c["per_step"] for c in cs), _rows(rep)
    shapes = sorted(s for c in cs for s in c["shapes"])
    assert shapes == sorted([f"pred[{n_exc}]", f"pred[{n_inh}]"]), _rows(rep)
    if n_exc + n_inh <= ALL_GATHER_COMBINE_BYTES:
        assert len(cs) == 1, f"expected one combined all-gather per step: {_rows(rep)}"


def check_coba_cpu(rep, n_exc: int, n_inh: int):
    """XLA:CPU (chapter 4): two separate synchronous all-gathers per step, E and I."""
    got = sorted((c["op"], c["async"], c["per_step"], c["nbytes"]) for c in rep["collectives"])
    assert got == sorted([("all-gather", False, True, n_exc), ("all-gather", False, True, n_inh)]), got


def check_fsdp_gpu(rep, D: int, layers: int, n: int):
    """XLA:GPU, FSDP: the weights' all-gathers combined (fewer instructions than layers, up to
    the 30 MiB threshold), and the gradients reduce-scattered back to their shards in ONE
    combined reduce-scatter; no all-reduce."""
    cs = rep["collectives"]
    ag = [c for c in cs if c["op"] == "all-gather"]
    rs = [c for c in cs if c["op"] == "reduce-scatter"]
    assert all(c["async"] for c in cs) and not [c for c in cs if c["op"] == "all-reduce"], _rows(rep)
    assert sum(len(c["shapes"]) for c in ag) == layers and len(ag) < layers, _rows(rep)
    assert len(rs) == 1 and rs[0]["nbytes"] == layers * D * D * 4 // n, _rows(rep)


def check_fsdp_cpu(rep, D: int, layers: int):
    """XLA:CPU, FSDP: one all-gather per weight, and the gradients all-reduced whole (then each
    device keeps its slice): no reduce-scatter."""
    ops = _op_counts(rep)
    assert ops["all-gather"] == layers and ops["reduce-scatter"] == 0 and ops["all-reduce"] >= 1, ops


def _op_counts(rep):
    from collections import Counter

    return Counter(c["op"] for c in rep["collectives"])
