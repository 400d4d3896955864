"""Compatibility: FSDP and the explicit hidden split moved to :mod:`shardbook.rnn.pure`.

New code imports ``from shardbook import book`` and uses ``book.rnn``.  This module
only keeps the old names for the notebooks that have not moved yet (issue 18).
"""
from __future__ import annotations

# --- compat: notebooks not yet migrated (issue 18); remove with them
# Chapter 3 prints the source of _gathered_loss and explicit_hidden_loss with
# inspect.getsource (cells "src = inspect.getsource(fsdp._gathered_loss) ..." and
# "lines = inspect.getsource(fsdp.explicit_hidden_loss)"), so their old text stays
# here, working, until it shows the regions "rnn.fsdp" and "rnn.explicit" instead.
# tests/test_ch3_parallelism.py checks that the old text computes what rnn.pure does.
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .rnn.pure import (
    explicit_grad_fn,
    fsdp_grad_fn,
    fsdp_specs,
    fsdp_train_step,
    loss,
    own_block_only,
)

_loss = loss


def _gathered_loss(params, xs, ys, replicated):
    full = {k: jax.lax.with_sharding_constraint(w, replicated) for k, w in params.items()}
    return _loss(full, xs, ys)


def _own_block_only(h, axis, k):
    return own_block_only(h, axis)


def explicit_hidden_loss(mesh, axis: str = "hidden", *, gather: bool = True):
    """The old text of :func:`shardbook.rnn.pure.explicit_hidden_loss` (chapter 3)."""
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
                          in_specs=(P(None, axis), P(None, axis), P(axis, None),
                                    P(), P()),
                          out_specs=P())

    def loss_fn(params, xs, ys):
        return split(params["win"], params["wrec"], params["wout"], xs, ys)

    return loss_fn


__all__ = [
    "explicit_grad_fn",
    "explicit_hidden_loss",
    "fsdp_grad_fn",
    "fsdp_specs",
    "fsdp_train_step",
    "loss",
]
