"""The RNN of the BrainPy sharding discussion, written once.

    h_t = tanh(x_t @ W_in + h_{t-1} @ W_rec),      y_t = h_t @ W_out

Four modules.  Only ``stateful`` imports another of them (``pure``); ``sizes`` and
``model`` import none:

* :mod:`.sizes`: the bytes formula (no JAX): :func:`weight_count`,
  :func:`weight_bytes`, :func:`grad_bytes`.
* :mod:`.model`: the BrainPy model (``RNN``), its task, loss, gradient and jitted
  Adam step (``bm.jit``), as chapters 2 and 3 teach them.
* :mod:`.pure`: the same mathematics as pure JAX functions of the weights: the loss
  (with rematerialisation, bf16 mixed precision and the hidden-split recurrences as
  options), one Adam update, gradient accumulation, the donating step, FSDP, and the
  hand-written hidden split with ``jax.shard_map`` (all-gather or collective matmul).
* :mod:`.stateful`: chapter 3's hidden split with brainstate states and
  ``brainstate.transform.shard_map``.

Importing the package imports the BrainPy model, so import it after
:func:`shardbook.book.setup_devices`; ``from shardbook.rnn.sizes import weight_count``
alone starts neither JAX nor BrainPy.
"""
from __future__ import annotations

from . import model, pure, sizes, stateful
from .model import (
    RNN,
    make_grad_fn,
    make_loss_fn,
    make_task,
    make_train_step,
    params_of,
    settle_layouts,
    shard_batch,
    train,
)
from .pure import (
    WHOLE,
    CollectiveMatmul,
    HiddenSplit,
    Recurrence,
    adam_init,
    adam_update,
    cell,
    explicit_grad_fn,
    explicit_hidden_loss,
    fsdp_grad_fn,
    fsdp_loss,
    fsdp_specs,
    fsdp_train_step,
    functional_step,
    grad_fn,
    hidden_specs,
    loss,
    own_block_only,
    value_and_grad,
)
from .sizes import grad_bytes, weight_bytes, weight_count
from .stateful import StateRNN, StateSplit, stateful_grad_fn

__all__ = [
    # sizes (no JAX)
    "weight_count", "weight_bytes", "grad_bytes",
    # the BrainPy model
    "RNN", "make_task", "make_loss_fn", "make_grad_fn", "make_train_step", "train",
    "shard_batch", "params_of", "settle_layouts",
    # pure JAX
    "Recurrence", "WHOLE", "HiddenSplit", "CollectiveMatmul", "cell", "loss",
    "value_and_grad", "adam_init", "adam_update", "functional_step", "grad_fn",
    "fsdp_specs", "fsdp_loss", "fsdp_grad_fn", "fsdp_train_step", "hidden_specs",
    "explicit_hidden_loss", "explicit_grad_fn", "own_block_only",
    # brainstate
    "StateRNN", "StateSplit", "stateful_grad_fn",
    # the modules
    "sizes", "model", "pure", "stateful",
]
