"""The RNN of the BrainPy sharding discussion, written once.

    h_t = tanh(x_t @ W_in + h_{t-1} @ W_rec),      y_t = h_t @ W_out

Four modules, whose imports point one way (``sizes`` <- ``pure`` <- ``stateful``;
``model`` stands beside them):

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

Names load on first use, so ``from shardbook.rnn import weight_count`` starts neither
JAX nor BrainPy.  Import the others after :func:`shardbook.setup_devices`.
"""
from __future__ import annotations

import importlib

_WHERE = {
    # sizes (no JAX)
    "weight_count": "sizes", "weight_bytes": "sizes", "grad_bytes": "sizes",
    # the BrainPy model
    "RNN": "model", "make_task": "model", "make_loss_fn": "model",
    "make_grad_fn": "model", "make_train_step": "model", "train": "model",
    "shard_batch": "model", "params_of": "model", "settle_layouts": "model",
    # pure JAX
    "Recurrence": "pure", "WHOLE": "pure", "HiddenSplit": "pure",
    "CollectiveMatmul": "pure", "cell": "pure", "loss": "pure",
    "value_and_grad": "pure",
    "adam_init": "pure", "adam_update": "pure", "functional_step": "pure",
    "grad_fn": "pure", "fsdp_specs": "pure", "fsdp_loss": "pure",
    "fsdp_grad_fn": "pure", "fsdp_train_step": "pure", "hidden_specs": "pure",
    "explicit_hidden_loss": "pure", "explicit_grad_fn": "pure",
    "own_block_only": "pure",
    # brainstate
    "StateRNN": "stateful", "StateSplit": "stateful", "stateful_grad_fn": "stateful",
}

__all__ = [*_WHERE, "sizes", "model", "pure", "stateful"]


def __getattr__(name: str):
    if name in ("sizes", "model", "pure", "stateful"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"shardbook.rnn has no public name {name!r}")


def __dir__():
    return list(__all__)
