"""FSDP and an explicit hidden split for the book's RNN (chapter 3).

Both are written as pure JAX functions of the weights ``{'win', 'wrec', 'wout'}``
(the same mathematics as ``shardbook.models.RNN`` and the loss of
``make_train_step``), so that the notebook and ``tests/test_ch3_parallelism.py``
compile exactly the same programs.

* **FSDP** (fully sharded data parallelism; ZeRO stage 3, Rajbhandari et al., 2020,
  arXiv:1910.02054): the batch is split as in data parallelism, and the weights and
  Adam moments are *stored* split over the same ``'batch'`` axis.  The loss gathers
  each weight before use (``with_sharding_constraint`` to replicated: an all-gather),
  and the gradient of a split weight comes back split (a reduce-scatter; XLA:CPU
  writes it as an all-reduce followed by a slice).
* **Explicit hidden split** with ``jax.shard_map``: each device runs the recurrence on
  its own block of hidden units and says itself which collectives run:
  ``all_gather`` of the hidden state every step, one ``psum`` of the outputs after the
  loop.  ``jax.grad`` transposes the ``all_gather`` into a ``psum_scatter``
  (reduce-scatter) in the backward loop.

Import this module only after :func:`shardbook.setup_devices`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from .train_memory import _loss

__all__ = ["fsdp_specs", "fsdp_grad_fn", "fsdp_train_step", "explicit_hidden_loss",
           "explicit_grad_fn", "loss"]

loss = _loss   # the one-device loss of the pure RNN: loss(params, xs, ys)


def fsdp_specs(axis: str = "batch") -> dict:
    """Where FSDP stores each weight: split along its hidden dimension over ``axis``."""
    return {"win": P(None, axis), "wrec": P(axis, None), "wout": P(axis, None)}


def _gathered_loss(params, xs, ys, replicated):
    full = {k: jax.lax.with_sharding_constraint(w, replicated) for k, w in params.items()}
    return _loss(full, xs, ys)


def fsdp_grad_fn(mesh, axis: str = "batch"):
    """``grads(params, xs, ys) -> (grads, loss)`` jitted for FSDP on ``mesh``.

    ``params`` and the returned ``grads`` are laid out as :func:`fsdp_specs`; ``xs``
    and ``ys`` are split by batch.
    """
    ps = {k: NamedSharding(mesh, s) for k, s in fsdp_specs(axis).items()}
    data, rep = NamedSharding(mesh, P(axis)), NamedSharding(mesh, P())

    def grads(params, xs, ys):
        value, g = jax.value_and_grad(_gathered_loss)(params, xs, ys, rep)
        return g, value

    return jax.jit(grads, in_shardings=(ps, data, data), out_shardings=(ps, rep))


def fsdp_train_step(mesh, axis: str = "batch", lr: float = 1e-3, beta1: float = 0.9,
                    beta2: float = 0.999, eps: float = 1e-8, donate: bool = False):
    """One FSDP Adam step ``step(params, opt, xs, ys) -> (params, opt, loss)``.

    Weights, gradients and both moments stay split over ``axis``; only the forward
    and backward passes see whole weights, as temporaries.
    """
    ps = {k: NamedSharding(mesh, s) for k, s in fsdp_specs(axis).items()}
    data, rep = NamedSharding(mesh, P(axis)), NamedSharding(mesh, P())
    opt_s = dict(m=ps, v=ps, t=rep)

    def step(params, opt, xs, ys):
        value, g = jax.value_and_grad(_gathered_loss)(params, xs, ys, rep)
        t = opt["t"] + 1
        a = lr / (1 - beta1 ** t) * jnp.sqrt(1 - beta2 ** t)
        m = {k: beta1 * opt["m"][k] + (1 - beta1) * g[k] for k in g}
        v = {k: beta2 * opt["v"][k] + (1 - beta2) * g[k] ** 2 for k in g}
        new = {k: params[k] - a * m[k] / (jnp.sqrt(v[k]) + eps) for k in g}
        return new, dict(m=m, v=v, t=t), value

    return jax.jit(step, in_shardings=(ps, opt_s, data, data),
                   out_shardings=(ps, opt_s, rep), donate_argnums=(0, 1) if donate else ())


def _own_block_only(h, axis, k):
    """The planted bug of the tests: ``h_{t-1}`` with the other devices' blocks at zero."""
    full = jnp.zeros((h.shape[0], h.shape[1] * k), h.dtype)
    start = jax.lax.axis_index(axis) * h.shape[1]
    return jax.lax.dynamic_update_slice_in_dim(full, h, start, 1)


def explicit_hidden_loss(mesh, axis: str = "hidden", *, gather: bool = True):
    """The RNN loss with the hidden axis split by hand (``jax.shard_map``).

    Each device holds ``win[:, block]``, ``wrec[:, block]``, ``wout[block, :]`` and its
    block of the hidden state.  ``gather=False`` plants a bug for the tests: the
    all-gather of ``h_{t-1}`` is forgotten, each device sees only its own block.
    """
    k = mesh.shape[axis]

    def local(win, wrec, wout, xs, ys):
        def body(h, x):                              # h: (B, H/k), this device's units
            if gather:
                h_all = jax.lax.all_gather(h, axis, axis=1, tiled=True)   # (B, H)
            else:
                h_all = _own_block_only(h, axis, k)
            h = jnp.tanh(x @ win + h_all @ wrec)
            return h, h @ wout                       # a partial sum of y_t

        h0 = jnp.zeros((xs.shape[0], wrec.shape[1]), xs.dtype)
        h0 = jax.lax.pcast(h0, (axis,), to="varying")    # each device's own zeros
        _, y_part = jax.lax.scan(body, h0, jnp.swapaxes(xs, 0, 1))
        y = jax.lax.psum(y_part, axis)               # once, after the loop
        return jnp.mean((jnp.swapaxes(y, 0, 1) - ys) ** 2)

    split = jax.shard_map(local, mesh=mesh,
                          in_specs=(P(None, axis), P(None, axis), P(axis, None), P(), P()),
                          out_specs=P())

    def loss_fn(params, xs, ys):
        return split(params["win"], params["wrec"], params["wout"], xs, ys)

    return loss_fn


def explicit_grad_fn(mesh, axis: str = "hidden", *, gather: bool = True):
    """``grads(params, xs, ys) -> (grads, loss)`` of :func:`explicit_hidden_loss`, jitted."""
    loss_fn = explicit_hidden_loss(mesh, axis, gather=gather)

    def grads(params, xs, ys):
        value, g = jax.value_and_grad(loss_fn)(params, xs, ys)
        return g, value

    return jax.jit(grads)
