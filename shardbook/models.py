"""Compatibility: the RNN moved to :mod:`shardbook.rnn` (``shardbook.rnn.model``).

New code imports ``from shardbook import book`` and uses ``book.rnn``.  This module
only keeps the old names for the notebooks that have not moved yet (issue 18).
"""
from __future__ import annotations

# --- compat: notebooks not yet migrated (issue 18); remove with them
from .devices import mesh_shape_2d
from .rnn.model import (
    RNN,
    make_grad_fn,
    make_loss_fn,
    make_task,
    make_train_step,
    shard_batch,
    train,
)


def rnn_bytes(num_in: int, num_hid: int, num_out: int, batch: int, time: int,
              hidden_shards: int = 1, batch_shards: int = 1, itemsize: int = 4) -> dict:
    """The arrays that live between steps on one device (chapter 5b): weights, Adam
    moments, state and data, from :func:`shardbook.train_memory.predict`."""
    from .train_memory import predict

    p = predict(num_in, num_hid, num_out, batch, time, hidden_shards=hidden_shards,
                batch_shards=batch_shards, itemsize=itemsize)
    return {"weights": p.weights, "adam": p.adam, "state": p.state, "data": p.data}


__all__ = [
    "RNN",
    "make_grad_fn",
    "make_loss_fn",
    "make_task",
    "make_train_step",
    "mesh_shape_2d",
    "rnn_bytes",
    "shard_batch",
    "train",
]
