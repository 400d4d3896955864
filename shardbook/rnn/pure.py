"""The RNN as pure JAX functions of its weights: one loss, one Adam, every split.

The weights are a dict ``{'win': (I, H), 'wrec': (H, H), 'wout': (H, O)}``, the model
and loss of :class:`shardbook.rnn.model.RNN` (``tests/test_train_memory.py`` checks
that both train alike).  As pure functions, a step can donate its inputs and the hidden
split can be written by hand.

:func:`loss` is written once; its options are the book's variants: ``recurrence``
(:data:`WHOLE`, :class:`HiddenSplit`, :class:`CollectiveMatmul`), ``remat``/``policy``
(``jax.checkpoint`` on the scan body) and ``dtype`` (``jnp.bfloat16``: the forward pass
in bf16; weights, gradients and Adam stay float32).  :func:`value_and_grad` adds
``micro_batches``; :func:`adam_update` is BrainPy's ``bp.optim.Adam``.

Import this module only after :func:`shardbook.book.setup_devices`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

__all__ = [
    "NAMES",
    "WHOLE",
    "CollectiveMatmul",
    "HiddenSplit",
    "Recurrence",
    "adam_init",
    "adam_update",
    "cell",
    "explicit_grad_fn",
    "explicit_hidden_loss",
    "fsdp_grad_fn",
    "fsdp_loss",
    "fsdp_specs",
    "fsdp_train_step",
    "functional_step",
    "grad_fn",
    "hidden_specs",
    "loss",
    "own_block_only",
    "value_and_grad",
]

NAMES = ("win", "wrec", "wout")


# ------------------------------------------------------------------ the recurrence
class Recurrence:
    """How one time step reaches the hidden units it needs: ``h_{t-1} @ W_rec``.

    This one holds every unit (one device, or sharding propagation under ``jit``).
    """

    def start(self, h0):
        """The state before the first step."""
        return h0

    def recur(self, h, wrec):
        """``h_{t-1} @ W_rec`` for this device's hidden units."""
        return h @ wrec

    def outputs(self, y):
        """The outputs ``y_t`` of all steps, from this device's contributions."""
        return y


WHOLE = Recurrence()


# region: rnn.hidden-split
@dataclass(frozen=True)
class HiddenSplit(Recurrence):
    """Inside ``jax.shard_map``: this device holds one block of the hidden units.

    ``W_in[:, block]``, ``W_rec[:, block]``, ``W_out[block, :]`` and ``h[:, block]``.
    Each step all-gathers ``h_{t-1}`` (the product needs every unit); each device's
    ``h_t @ W_out[block]`` is a partial sum of ``y_t``, summed once after the loop.
    ``gather=False`` is the planted bug of the tests: the all-gather forgotten.
    """

    axis: str = "hidden"
    gather: bool = True

    def start(self, h0):
        return jax.lax.pcast(h0, (self.axis,), to="varying")  # each device's zeros

    def recur(self, h, wrec):                     # h: (B, H/k), this device's units
        if self.gather:
            h_all = jax.lax.all_gather(h, self.axis, axis=1, tiled=True)   # (B, H)
        else:
            h_all = own_block_only(h, self.axis)
        return h_all @ wrec

    def outputs(self, y):
        return jax.lax.psum(y, self.axis)         # once, after the loop
# endregion


def own_block_only(h, axis: str):
    """The planted bug: ``h_{t-1}`` with the other devices' blocks left at zero."""
    k = jax.lax.axis_size(axis)
    full = jnp.zeros((h.shape[0], h.shape[1] * k), h.dtype)
    start = jax.lax.axis_index(axis) * h.shape[1]
    return jax.lax.dynamic_update_slice_in_dim(full, h, start, 1)


# region: rnn.collective-matmul
@dataclass(frozen=True)
class CollectiveMatmul(HiddenSplit):
    """The hidden split without an all-gather: a collective matmul.

    ``h_{t-1} @ W_rec[:, mine]`` is a sum over the k blocks of ``h_{t-1}``:
    ``sum_j h_j @ W_rec[rows j, mine]``.  Each device starts with its own block,
    and k - 1 times passes the block it holds to the next device (``ppermute``,
    device d to d + 1) while it multiplies the block it has with the matching rows
    of its ``W_rec``.  The transfer of one block and the product of the previous one
    do not depend on each other, so a compiler can overlap them (JAX docs, "Manual
    parallelism with shard_map", example "all-gather on one side"; Wang et al.,
    ASPLOS 2023, doi:10.1145/3567955.3567959).

    ``reverse=True`` is the planted bug: blocks travel the other way (d to d - 1)
    while the rows are still chosen for d - 1's block.  With k = 2 both directions
    coincide, so the bug shows from 3 devices on.
    """

    reverse: bool = False

    def recur(self, h, wrec):                     # h: (B, H/k); wrec: (H, H/k)
        k, me = jax.lax.axis_size(self.axis), jax.lax.axis_index(self.axis)
        n = h.shape[1]                            # hidden units per device
        to = -1 if self.reverse else 1
        ring = [(d, (d + to) % k) for d in range(k)]

        def rows(j):                              # the rows of W_rec for block j
            return jax.lax.dynamic_slice_in_dim(wrec, j * n, n, axis=0)

        block, acc = h, h @ rows(me)
        for s in range(1, k):
            block = jax.lax.ppermute(block, self.axis, ring)   # next block arrives
            acc = acc + block @ rows((me - s) % k)             # from device me - s
        return acc
# endregion


# ------------------------------------------------------------------ the one loss
def cell(w, h, x, recurrence: Recurrence = WHOLE):
    """One time step: ``(h_t, y_t)`` from ``h_{t-1}`` (B, H_d) and ``x_t`` (B, I)."""
    h = jnp.tanh(x @ w["win"] + recurrence.recur(h, w["wrec"]))
    return h, h @ w["wout"]


# region: rnn.pure.loss
def loss(params, xs, ys, *, recurrence: Recurrence = WHOLE, remat: bool = False,
         policy=None, dtype=None):
    """Mean squared error of the RNN run over the whole sequence.

    ``xs`` (B, T, I), ``ys`` (B, T, O).  ``remat=True`` wraps the step in
    ``jax.checkpoint`` (with ``policy``, e.g. ``jax.checkpoint_policies.
    dots_saveable``; ``None`` saves nothing but the step's inputs).  ``dtype``
    (e.g. ``jnp.bfloat16``) is the type the forward pass computes in.
    """
    dt = xs.dtype if dtype is None else dtype
    w = {k: params[k].astype(dt) for k in NAMES}    # no-op in float32
    xs_t = jnp.swapaxes(xs, 0, 1).astype(dt)        # time first, for the scan

    def step(h, x):
        return cell(w, h, x, recurrence)

    if remat:
        step = jax.checkpoint(step, policy=policy, prevent_cse=False)
    h0 = recurrence.start(jnp.zeros((xs.shape[0], w["wrec"].shape[1]), dt))
    _, y = jax.lax.scan(step, h0, xs_t)
    y = recurrence.outputs(y.astype(ys.dtype))
    return jnp.mean((jnp.swapaxes(y, 0, 1) - ys) ** 2)
# endregion


# region: rnn.accumulate
def value_and_grad(params, xs, ys, *, micro_batches: int = 1, loss_fn=loss,
                   **options):
    """``(loss, grads)`` of ``loss_fn``; with ``micro_batches=k`` accumulated.

    The batch is cut into k micro-batches of B / k samples (sample ``i`` goes to
    micro-batch ``i mod k``, so each stays split over a ``'batch'`` axis), their
    gradients are summed in a ``lax.scan`` and divided by k.  Every micro-batch
    has the same size, so the mean of their mean losses is the batch's mean loss:
    the same gradient, with activations for B / k samples at a time.
    """
    vg = jax.value_and_grad(partial(loss_fn, **options))
    k = micro_batches
    if k == 1:
        return vg(params, xs, ys)
    if k < 1 or xs.shape[0] % k:
        raise ValueError(f"micro_batches={k} does not divide the batch {xs.shape[0]}")

    def cut(a):                                   # (B, ...) -> (k, B / k, ...)
        return jnp.swapaxes(a.reshape(a.shape[0] // k, k, *a.shape[1:]), 0, 1)

    def one(total, batch):
        return jax.tree.map(jnp.add, total, vg(params, *batch)), None

    zero = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
    total, _ = jax.lax.scan(one, zero, (cut(xs), cut(ys)))
    return jax.tree.map(lambda a: a / k, total)
# endregion


def grad_fn(**options):
    """``grads(params, xs, ys) -> (grads, loss)``, jitted; ``options`` as
    :func:`value_and_grad` and :func:`loss` take them."""
    def grads(params, xs, ys):
        value, g = value_and_grad(params, xs, ys, **options)
        return g, value

    return jax.jit(grads)


# ------------------------------------------------------------------ one Adam
def adam_init(params: dict) -> dict:
    """Adam's state: moments ``m``, ``v`` (laid out as ``params``), counter ``t``."""
    return {"m": {k: jnp.zeros_like(v) for k, v in params.items()},
            "v": {k: jnp.zeros_like(v) for k, v in params.items()},
            "t": jnp.zeros((), jnp.int32)}


def adam_update(params: dict, opt: dict, grads: dict, *, lr: float = 1e-3,
                beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
    """One Adam update, as BrainPy's ``bp.optim.Adam`` does it: ``(params, opt)``."""
    t = opt["t"] + 1
    a = lr / (1 - beta1 ** t) * jnp.sqrt(1 - beta2 ** t)     # bias correction
    m = {k: beta1 * opt["m"][k] + (1 - beta1) * g for k, g in grads.items()}
    v = {k: beta2 * opt["v"][k] + (1 - beta2) * g ** 2 for k, g in grads.items()}
    new = {k: params[k] - a * m[k] / (jnp.sqrt(v[k]) + eps) for k in grads}
    return new, {"m": m, "v": v, "t": t}


def functional_step(lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                    eps: float = 1e-8, donate: bool = False, **options):
    """``step(params, opt, xs, ys) -> (params, opt, loss)`` under ``jax.jit``.

    ``donate=True`` donates the old weights and moments (deleted after the call).
    ``options`` go to :func:`value_and_grad` and :func:`loss`."""
    def step(params, opt, xs, ys):
        value, g = value_and_grad(params, xs, ys, **options)
        new, opt = adam_update(params, opt, g, lr=lr, beta1=beta1, beta2=beta2, eps=eps)
        return new, opt, value

    return jax.jit(step, donate_argnums=(0, 1) if donate else ())


# ------------------------------------------------------------------ FSDP
# region: rnn.fsdp
def fsdp_specs(axis: str = "batch") -> dict:
    """Where FSDP stores each weight: split along its hidden dimension over ``axis``."""
    return {"win": P(None, axis), "wrec": P(axis, None), "wout": P(axis, None)}


def fsdp_loss(params, xs, ys, *, replicated, **options):
    """The loss with each stored block gathered whole before use (an all-gather)."""
    whole = {k: jax.lax.with_sharding_constraint(w, replicated)
             for k, w in params.items()}
    return loss(whole, xs, ys, **options)
# endregion


def fsdp_grad_fn(mesh, axis: str = "batch", **options):
    """``grads(params, xs, ys) -> (grads, loss)`` jitted for FSDP on ``mesh``.

    FSDP (ZeRO stage 3, arXiv:1910.02054): the batch is split over ``axis``, and the
    weights and returned gradients are stored split over it too, as :func:`fsdp_specs`
    (the gradients by a reduce-scatter; XLA:CPU writes all-reduce then slice)."""
    ps = {k: NamedSharding(mesh, s) for k, s in fsdp_specs(axis).items()}
    data, rep = NamedSharding(mesh, P(axis)), NamedSharding(mesh, P())

    def grads(params, xs, ys):
        value, g = value_and_grad(params, xs, ys, loss_fn=fsdp_loss, replicated=rep,
                                  **options)
        return g, value

    return jax.jit(grads, in_shardings=(ps, data, data), out_shardings=(ps, rep))


def fsdp_train_step(mesh, axis: str = "batch", lr: float = 1e-3, beta1: float = 0.9,
                    beta2: float = 0.999, eps: float = 1e-8, donate: bool = False,
                    **options):
    """One FSDP Adam step ``step(params, opt, xs, ys) -> (params, opt, loss)``.

    Weights, gradients and both moments stay split over ``axis``; only the forward
    and backward passes see whole weights, as temporaries."""
    ps = {k: NamedSharding(mesh, s) for k, s in fsdp_specs(axis).items()}
    data, rep = NamedSharding(mesh, P(axis)), NamedSharding(mesh, P())
    opt_s = {"m": ps, "v": ps, "t": rep}

    def step(params, opt, xs, ys):
        value, g = value_and_grad(params, xs, ys, loss_fn=fsdp_loss, replicated=rep,
                                  **options)
        new, opt = adam_update(params, opt, g, lr=lr, beta1=beta1, beta2=beta2, eps=eps)
        return new, opt, value

    return jax.jit(step, in_shardings=(ps, opt_s, data, data),
                   out_shardings=(ps, opt_s, rep),
                   donate_argnums=(0, 1) if donate else ())


# ------------------------------------------------------------------ by hand
def hidden_specs(axis: str = "hidden") -> dict:
    """The hidden split's layout: ``W_in``, ``W_rec`` by columns, ``W_out`` by rows."""
    return {"win": P(None, axis), "wrec": P(None, axis), "wout": P(axis, None)}


# region: rnn.explicit
def explicit_hidden_loss(mesh, axis: str = "hidden", *, gather: bool = True,
                         overlap: bool = False, reverse: bool = False, **options):
    """The RNN loss with the hidden axis split by hand (``jax.shard_map``).

    Each device runs :func:`loss` on its own block of hidden units, with the
    recurrence :class:`HiddenSplit` (``overlap=False``: an all-gather of
    ``h_{t-1}`` per step) or :class:`CollectiveMatmul` (``overlap=True``:
    ``ppermute`` steps).  ``gather=False`` and ``reverse=True`` plant the bugs of
    the tests.  ``options`` go to :func:`loss` (``remat``, ``dtype``).
    """
    if overlap:
        recurrence = CollectiveMatmul(axis, reverse=reverse)
    else:
        recurrence = HiddenSplit(axis, gather=gather)

    def local(params, xs, ys):                    # this device's block of units
        return loss(params, xs, ys, recurrence=recurrence, **options)

    return jax.shard_map(local, mesh=mesh, in_specs=(hidden_specs(axis), P(), P()),
                         out_specs=P())
# endregion


def explicit_grad_fn(mesh, axis: str = "hidden", **options):
    """``grads(params, xs, ys) -> (grads, loss)`` of :func:`explicit_hidden_loss`,
    jitted; ``options`` as there."""
    loss_fn = explicit_hidden_loss(mesh, axis, **options)

    def grads(params, xs, ys):
        value, g = jax.value_and_grad(loss_fn)(params, xs, ys)
        return g, value

    return jax.jit(grads)
