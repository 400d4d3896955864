"""The book's sharded steps, built for any mesh: what ``shardbook.gputarget`` compiles.

Each builder takes a :class:`shardbook.gputarget.Target` and returns ``(jitted, args)``:
a plain ``jax.jit`` function and its arguments as ``jax.ShapeDtypeStruct``\\ s on the
target's mesh.  The models are the chapters' own (``shardbook.rnn``,
``shardbook.coba``), at the chapters' sizes for the target's device count
(``shardbook.config``).  They are built on devices that can hold arrays (the compile
child's simulated CPU devices, or the notebook's own devices), in a mesh of the same
shape and axis names as the target's. Shardings that a model keeps (``RNN.use_mesh``,
``COBAHH.replicated``) are pointed at the target mesh before the step is traced.

Every builder works for any device count (the configuration rounds sizes up to divide).
What each compiler makes of these steps is in ``shardbook/expectations.toml``
(``shardbook.expect``); ``tests/test_expect.py`` compiles every builder for both.
Import this module only after :func:`shardbook.book.setup_devices` (it imports BrainPy).
"""
from __future__ import annotations

import warnings
from math import gcd

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import brainpy.math as bm

from .config import config
from .devices import divisible_size, mesh_shape_2d

__all__ = [
    "CNN_SHAPES", "cnn_data_parallel", "coba_hh", "fsdp_mlp", "matmul",
    "rnn_data_parallel", "rnn_dp_shard_map", "rnn_forward", "rnn_fsdp",
    "rnn_functional", "rnn_hidden", "rnn_hidden_rows", "rnn_one_gpu", "rnn_shard_map",
    "scan_over_time", "tiny_data_parallel",
]


def _sizes(name, target, given):
    """The chapter's sizes for the target's device count, with ``given`` ones kept."""
    return {**config(name, target.n).asdict(),
            **{k: v for k, v in given.items() if v is not None}}


def _retarget_state(model, target):
    """Point the RNN's state layout at the target mesh (reset_state uses it)."""
    model.use_mesh(target.sharding().mesh)


def _rnn_step(target, chapter: str, sizes: dict, shape, names, spec,
              annotate: str = "all"):
    """The BrainPy RNN's jitted Adam step (``make_train_step``) at ``chapter``'s sizes,
    built on a mesh of ``shape`` named ``names``, its data laid out as ``spec``."""
    from .rnn.model import RNN, make_train_step

    c = _sizes(chapter, target, sizes)
    B, T, I, H, O, lr = (c[k] for k in ("B", "T", "I", "H", "O", "lr"))
    target.mesh(shape, names)
    with bm.sharding.device_mesh(target.build_devices(shape), list(names)):
        model = RNN(I, H, O, B, annotate=annotate)
    step = make_train_step(model, lr=lr)
    _retarget_state(model, target)
    xs = target.struct((B, T, I), jnp.float32, spec)
    ys = target.struct((B, T, O), jnp.float32, spec)
    return target.bm_step(step, xs, ys)


def rnn_data_parallel(target, B=None, T=None, I=None, H=None, O=None, lr=None,
                      batch_sharded: bool = True):
    """Chapter 2: the RNN training step with the batch split over ``'batch'``.

    ``batch_sharded=False`` removes the annotation: the model is built without axis
    names (``annotate="none"``) and the data are replicated, so nothing is split.
    """
    return _rnn_step(target, "ch2", dict(B=B, T=T, I=I, H=H, O=O, lr=lr), (target.n,),
                     ("batch",), P("batch") if batch_sharded else P(),
                     annotate="all" if batch_sharded else "none")


def rnn_hidden(target, two_d: bool = False, B=None, T=None, I=None, H=None, O=None,
               lr=None):
    """Chapter 3: the hidden axis split over ``'hidden'`` (1-D), or ``('batch',
    'hidden')`` with ``mesh_shape_2d(n)`` (2-D).  The data are split by ``'batch'``
    where the mesh has it."""
    shape, names = ((mesh_shape_2d(target.n), ("batch", "hidden")) if two_d
                    else ((target.n,), ("hidden",)))
    return _rnn_step(target, "ch3", dict(B=B, T=T, I=I, H=H, O=O, lr=lr), shape, names,
                     P("batch") if two_d else P())


# ------------------------------------------- chapter 3's other RNN steps, for the table
_F32 = jnp.float32
_SPLIT = {
    "win": P(None, "hidden"),
    "wrec": P(None, "hidden"),
    "wout": P("hidden", None),
}


def _weights(target, I, H, O, specs):
    shapes = {"win": (I, H), "wrec": (H, H), "wout": (H, O)}
    return {k: target.struct(shapes[k], _F32, specs.get(k)) for k in shapes}


def rnn_hidden_rows(target, B=None, T=None, I=None, H=None, O=None,
                    lr=None):
    """Chapter 3: the hidden axis split over ``'hidden'``, but ``W_rec`` split by rows
    (``P('hidden', None)``) instead of columns."""
    from .rnn.model import RNN, make_train_step

    c = _sizes("ch3", target, dict(B=B, T=T, I=I, H=H, O=O, lr=lr))
    B, T, I, H, O, lr = (c[k] for k in ("B", "T", "I", "H", "O", "lr"))
    target.mesh((target.n,), ("hidden",))
    with bm.sharding.device_mesh(target.build_devices(), ["hidden"]) as mesh:
        model = RNN(I, H, O, B)
    model.wrec.value = jax.device_put(model.wrec.value,
                                      NamedSharding(mesh, P("hidden", None)))
    step = make_train_step(model, lr=lr)
    _retarget_state(model, target)
    xs = target.struct((B, T, I), _F32, P())
    ys = target.struct((B, T, O), _F32, P())
    return target.bm_step(step, xs, ys)


def rnn_forward(target, B=None, T=None, I=None, H=None, O=None):
    """Chapter 3: the hidden-split RNN run forward only (``DSTrainer.predict``)."""
    import brainpy as bp

    from .rnn.model import RNN

    c = _sizes("ch3", target, dict(B=B, T=T, I=I, H=H, O=O))
    B, T, I, H, O = (c[k] for k in ("B", "T", "I", "H", "O"))
    target.mesh((target.n,), ("hidden",))
    with bm.sharding.device_mesh(target.build_devices(), ["hidden"]):
        model = RNN(I, H, O, B)
    _retarget_state(model, target)

    @bm.jit
    def simulate(x):
        runner = bp.DSTrainer(model, progress_bar=False, numpy_mon_after_run=False)
        return runner.predict(x, reset_state=True)

    return target.bm_step(simulate, target.struct((B, T, I), _F32, P()))


def rnn_shard_map(target, B=None, T=None, I=None, H=None, O=None,
                  overlap: bool = False, forward: bool = False):
    """Chapter 3: the gradient of the hidden split written by hand (``jax.shard_map``,
    ``shardbook.rnn.pure.explicit_grad_fn``); ``overlap=True``: chapter 7's
    collective matmul instead of the per-step all-gather; ``forward=True``: the loss
    alone, forward only (page 3c's cost model counts its loop)."""
    from .rnn.pure import explicit_grad_fn, explicit_hidden_loss

    c = _sizes("ch3", target, dict(B=B, T=T, I=I, H=H, O=O))
    B, T, I, H, O = (c[k] for k in ("B", "T", "I", "H", "O"))

    mesh = target.mesh((target.n,), ("hidden",))
    params = _weights(target, I, H, O, _SPLIT)
    xs = target.struct((B, T, I), _F32, P())
    ys = target.struct((B, T, O), _F32, P())
    if forward:
        return jax.jit(explicit_hidden_loss(mesh, overlap=overlap)), (params, xs, ys)
    return explicit_grad_fn(mesh, overlap=overlap), (params, xs, ys)


def rnn_fsdp(target, B=None, T=None, I=None, H=None, O=None,
             lr=None, grads_only: bool = False):
    """Chapter 3: one FSDP Adam step of the RNN
    (``shardbook.rnn.pure.fsdp_train_step``): batch, weights and moments split over
    ``'batch'``; ``grads_only=True``: the gradients alone (``fsdp_grad_fn``), each used
    once (page 3c's control of the reduce-scatter rule)."""
    from .rnn.pure import fsdp_grad_fn, fsdp_specs, fsdp_train_step

    c = _sizes("ch3", target, dict(B=B, T=T, I=I, H=H, O=O, lr=lr))
    B, T, I, H, O, lr = (c[k] for k in ("B", "T", "I", "H", "O", "lr"))

    mesh = target.mesh((target.n,), ("batch",))
    params = _weights(target, I, H, O, fsdp_specs())
    xs = target.struct((B, T, I), _F32, P("batch"))
    ys = target.struct((B, T, O), _F32, P("batch"))
    if grads_only:
        return fsdp_grad_fn(mesh), (params, xs, ys)
    opt = {"m": dict(params), "v": dict(params),
           "t": target.struct((), jnp.int32, P())}
    return fsdp_train_step(mesh, lr=lr), (params, opt, xs, ys)


def rnn_functional(target, B=None, T=None, I=None, H=None, O=None,
                   lr=None, axis: str = "hidden", donate: bool = False,
                   explicit: bool = False):
    """Chapters 2 and 3: the pure Adam step (``rnn.pure.functional_step``) with the
    hidden axis (``axis='hidden'``), the batch (``'batch'``) or both (``'2d'``: a
    ``('batch', 'hidden')`` mesh of ``mesh_shape_2d(n)``) split, donated or not.
    ``explicit=True``: the hidden split written by hand, the loss of
    ``rnn.pure.explicit_hidden_loss`` (``jax.shard_map``), on the ``'hidden'`` axis."""
    from .rnn.pure import explicit_hidden_loss, functional_step

    if axis not in ("hidden", "batch", "2d"):
        raise ValueError(f"axis={axis!r}: give 'hidden', 'batch' or '2d'")
    if explicit and axis != "hidden":
        raise ValueError("explicit=True writes the hidden split by hand: axis='hidden'")
    c = _sizes("ch3", target, dict(B=B, T=T, I=I, H=H, O=O, lr=lr))
    B, T, I, H, O, lr = (c[k] for k in ("B", "T", "I", "H", "O", "lr"))

    if axis == "2d":
        mesh = target.mesh(mesh_shape_2d(target.n), ("batch", "hidden"))
    else:
        mesh = target.mesh((target.n,), (axis,))
    params = _weights(target, I, H, O, {} if axis == "batch" else _SPLIT)
    opt = {"m": dict(params), "v": dict(params),
           "t": target.struct((), jnp.int32, P())}
    data = P() if axis == "hidden" else P("batch")
    xs = target.struct((B, T, I), _F32, data)
    ys = target.struct((B, T, O), _F32, data)
    options = dict(loss_fn=explicit_hidden_loss(mesh)) if explicit else {}
    return functional_step(lr=lr, donate=donate, **options), (params, opt, xs, ys)


def fsdp_mlp(target, B=None, D=None, layers=None, lr=1e-2, params_sharded: bool = True):
    """Fully sharded data parallelism in plain JAX: the batch AND every weight matrix
    split over ``'batch'`` (rows), each weight all-gathered just before its layer uses
    it.

    ``params_sharded=False`` keeps the weights replicated: plain data parallelism.
    """
    c = _sizes("fsdp", target, dict(B=B, D=D, layers=layers))
    B, D, layers = c["B"], c["D"], c["layers"]
    target.mesh((target.n,), ("batch",))
    wspec = P("batch", None) if params_sharded else P()
    full = target.sharding(P())

    def loss(params, x):
        h = x
        for w in params:
            # gather the whole matrix where it is used: the FSDP all-gather
            if params_sharded:
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
    """The smallest data-parallel step: two weight matrices, replicated; a batch split
    over ``'batch'`` (or replicated, with ``batch_sharded=False``).  For the tests."""
    target.mesh((target.n,), ("batch",))

    def step(ws, x):
        def loss(ws):
            return jnp.mean(jnp.tanh(x @ ws[0]) @ ws[1])
        g = jax.grad(loss)(ws)
        return [w - 0.1 * gw for w, gw in zip(ws, g)]

    ws = [target.struct((D, D), jnp.float32, P()) for _ in range(2)]
    x = target.struct((B, D), jnp.float32, P("batch") if batch_sharded else P())
    return jax.jit(step), (ws, x)


# COBA-HH: resized compiles build the network at this small scale and trace it at the
# size asked for. 672 E + 168 I: both divide by 1..4 and 6..8 and neither equals an
# in-degree (64, 16) or a step count; other device counts build a multiple of it.
_SMALL_SCALE = 0.2


def coba_hh(
    target,
    scale: float = 1,
    steps: int = 100,
    record=("count",),
    neurons: int | None = None,
    gather: bool = True,
    conn: str = "index",
    kernel: str = "auto",
    spike_capacity: float | None = None,
):
    """Chapter 4: the COBA-HH loop (``coba.Simulation``), ``steps`` steps, split over
    ``'neuron'``.

    ``neurons`` (a multiple of 4200, 80 % E): compile for that size without building it.
    The network is built at a small scale and each state is traced at the size asked
    for, through a zero-memory stand-in (:meth:`Target.bm_step`'s ``resize``); every
    shape in the step comes from the state, so the program is the one the full network
    compiles to (``tests/test_gputarget.py`` checks that at 4200 neurons).
    ``gather=False`` removes the annotation that makes every device see every spike
    (``COBAHH.replicated`` set to ``None``).
    ``conn``: the delivery (``"index"``, ``"event"``, ``"push"``); for the CSR
    deliveries the per-device sizes their code keeps (buffer capacities, block sizes)
    are recomputed at the size asked for (:func:`_resize_deliveries`).

    Long because: the network is built small and traced at the target's size, with its
    shardings pointed at the target's mesh; the steps must stay in that order.
    """
    from . import coba

    mesh = target.mesh((target.n,), (coba.NEURON,))
    # the least multiple of the small scale whose populations (672 m E, 168 m I) the
    # device count splits: m = n / gcd(168, n), 1 at 1..4 and 6..8, 5 at 5 devices
    small_inh = coba.sizes(_SMALL_SCALE)[1]  # 168; E is 4 times it
    small_scale = _SMALL_SCALE * (target.n // gcd(small_inh, target.n))
    build_scale = small_scale if neurons is not None else scale
    extra = {} if spike_capacity is None else dict(spike_capacity=spike_capacity)
    net = coba.build(
        target.build_devices(), scale=build_scale, conn=conn, kernel=kernel, **extra
    )
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

    # called per state, after the states were found at the small size
    def resize(shape):
        if not applied:
            apply_sizes()  # the deliveries' static sizes, for the trace at size
            applied.append(True)
        return tuple(size_map.get(d, d) for d in shape)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return target.bm_step(sim.loop, idx, resize=resize)


def _delivery_objects(net):
    """The network's CSR delivery objects (``EventCSR`` and its kinds, the
    exchanges)."""
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
            slots, events = push.capacities(n_pre, n_local, k, devices, op.fraction)
            sizes.update(slots=slots, events=events)
        todo.append((op, sizes))

    def apply():
        for obj, sizes in todo:
            for key, value in sizes.items():
                setattr(obj, key, value)
    return out, apply


def sparse_index(target, N: int = 840, K: int = 84):
    """Chapter 5c, entry 8: a fixed in-degree index matrix ``(N, K)`` split by rows over
    ``'neuron'`` sums the 0/1 activity of its presynaptic neurons (``sparse.index``)."""
    target.mesh((target.n,), ("neuron",))

    def step(idx, x):
        return 0.5 * x[idx].sum(axis=1)

    idx = target.struct((N, K), jnp.int32, P("neuron", None))
    x = target.struct((N,), jnp.float32, P("neuron"))
    return jax.jit(step), (idx, x)


# ----------------------------------------------------------- chapters 1, 2 and 2b
def matmul(target, split: str = "contraction", M: int = 64, K: int = 32, N: int = 48):
    """Chapter 1: ``x @ W`` with the contraction dimension split
    (``split='contraction'``, an all-reduce), or the columns of W split and Y wanted
    whole (``'gather'``, an all-gather)."""
    M, K, N = (divisible_size(s, target.n) for s in (M, K, N))
    mesh = target.mesh((target.n,), ("batch",))
    if split == "contraction":
        specs, out = (P(None, "batch"), P("batch", None)), None
    elif split == "gather":
        specs, out = (P(), P(None, "batch")), NamedSharding(mesh, P())
    else:
        raise ValueError(f"split is 'contraction' or 'gather', not {split!r}")
    args = (target.struct((M, K), _F32, specs[0]),
            target.struct((K, N), _F32, specs[1]))
    return jax.jit(lambda a, b: a @ b, out_shardings=out), args


def scan_over_time(target, batch=None, time=None, feature=None, hidden: int = 16):
    """Chapter 1, exercise 1: a recurrence over inputs (batch, time, feature) that are
    split along time."""
    c = _sizes("ch1", target, dict(batch=batch, time=time, feature=feature))
    batch, time, feature = c["batch"], c["time"], c["feature"]
    target.mesh((target.n,), ("batch",))
    w = jnp.full((feature, hidden), 0.1)

    def recurrence(inputs):
        def one_step(h, x_t):
            h = jnp.tanh(x_t @ w + h)
            return h, h.sum()
        _, out = jax.lax.scan(one_step, jnp.zeros((batch, hidden)),
                              jnp.swapaxes(inputs, 0, 1))
        return out

    return jax.jit(recurrence), (target.struct((batch, time, feature), _F32,
                                               P(None, "batch")),)


def rnn_dp_shard_map(target, B=None, T=None, I=None, H=None, O=None, lr=None):
    """Chapter 2: the data-parallel RNN step written by hand: each device's loss sum and
    gradient over its samples, ONE ``psum`` of both, then Adam (pure JAX: the notebook
    runs the same model through BrainPy; the collectives are the same)."""
    from .rnn.pure import adam_update, loss

    c = _sizes("ch2", target, dict(B=B, T=T, I=I, H=H, O=O, lr=lr))
    B, T, I, H, O, lr = (c[k] for k in ("B", "T", "I", "H", "O", "lr"))
    mesh = target.mesh((target.n,), ("batch",))

    def per_device(params, xs, ys):
        total = lambda p: loss(p, xs, ys) * xs.shape[0]          # noqa: E731
        value, grads = jax.value_and_grad(total)(params)
        return jax.lax.psum((value, grads), "batch")             # THE all-reduce

    summed = jax.shard_map(per_device, mesh=mesh, out_specs=P(), check_vma=False,
                           in_specs=(P(), P("batch"), P("batch")))

    def step(params, opt, xs, ys):
        value, grads = summed(params, xs, ys)
        grads = {k: g / B for k, g in grads.items()}
        params, opt = adam_update(params, opt, grads, lr=lr)
        return params, opt, value / B

    params = _weights(target, I, H, O, {})
    opt = {"m": dict(params), "v": dict(params), "t": target.struct((), jnp.int32, P())}
    xs = target.struct((B, T, I), _F32, P("batch"))
    ys = target.struct((B, T, O), _F32, P("batch"))
    return jax.jit(step), (params, opt, xs, ys)


# Page 2b's LeNet (conv 3x3 8 - pool - conv 3x3 16 - pool - dense 32 - dense 10) on 8x8
# images, as pure JAX with the shapes of its brainpy.dnn parameters: the compiled
# step's collectives depend only on those.
CNN_SHAPES = {"conv1.w": (3, 3, 1, 8), "conv1.b": (1, 1, 8), "conv2.w": (3, 3, 8, 16),
              "conv2.b": (1, 1, 16), "fc1.W": (64, 32), "fc1.b": (32,),
              "fc2.W": (32, 10), "fc2.b": (10,)}


def _lenet(p, x):
    def conv(x, w, b):
        dims = ("NHWC", "HWIO", "NHWC")
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                            dimension_numbers=dims) + b

    def pool(x):
        return jax.lax.reduce_window(x, 0., jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1),
                                     "VALID") / 4

    x = pool(jax.nn.relu(conv(x, p["conv1.w"], p["conv1.b"])))
    x = pool(jax.nn.relu(conv(x, p["conv2.w"], p["conv2.b"])))
    x = jax.nn.relu(x.reshape(x.shape[0], -1) @ p["fc1.W"] + p["fc1.b"])
    return x @ p["fc2.W"] + p["fc2.b"]


def cnn_data_parallel(target, hand: bool = False, B=None):
    """Page 2b: one data-parallel training step of the LeNet, the batch split over
    ``'batch'``: by one annotation (``hand=False``), or written by hand with
    ``shard_map`` and one ``psum`` of the loss and the gradients (``hand=True``)."""
    B = B or config("ch2", target.n).B
    mesh = target.mesh((target.n,), ("batch",))

    def loss_sum(p, x, y):
        logp = jax.nn.log_softmax(_lenet(p, x))
        return -jnp.sum(jax.nn.one_hot(y, 10) * logp)

    def hand_grads(p, x, y):
        return jax.lax.psum(jax.value_and_grad(loss_sum)(p, x, y), "batch")

    if hand:
        grads_of = jax.shard_map(hand_grads, mesh=mesh, out_specs=P(), check_vma=False,
                                 in_specs=(P(), P("batch"), P("batch")))
    else:
        grads_of = jax.value_and_grad(loss_sum)

    def step(p, x, y):
        value, g = grads_of(p, x, y)
        return {k: p[k] - 0.01 * g[k] / B for k in p}, value / B

    p = {k: target.struct(s, _F32, P()) for k, s in CNN_SHAPES.items()}
    x = target.struct((B, 8, 8, 1), _F32, P("batch"))
    y = target.struct((B,), jnp.int32, P("batch"))
    return jax.jit(step), (p, x, y)


def rnn_one_gpu(target, remat: bool = False, micro_batches: int = 1, dtype=None,
                B=None, T=None, I=None, H=None, O=None):
    """Page 2c: the RNN's gradient on ONE device (``rnn.pure.grad_fn``) with a fix of
    "is one GPU enough?": ``remat``, ``micro_batches`` or ``dtype="bfloat16"``."""
    from .rnn.pure import grad_fn

    c = _sizes("ch2c", target, dict(B=B, T=T, I=I, H=H, O=O))
    B, T, I, H, O = (c[k] for k in ("B", "T", "I", "H", "O"))
    target.mesh((target.n,), ("x",))
    params = _weights(target, I, H, O, {})
    xs = target.struct((B, T, I), _F32, P())
    ys = target.struct((B, T, O), _F32, P())
    options = dict(remat=remat, micro_batches=micro_batches,
                   dtype=None if dtype is None else jnp.dtype(dtype))
    return grad_fn(**options), (params, xs, ys)
