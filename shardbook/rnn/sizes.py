"""The RNN's sizes in bytes: the one formula every chapter, builder and model uses.

The RNN has three weight matrices, ``W_in (I, H)``, ``W_rec (H, H)`` and
``W_out (H, O)``: ``(I + H + O) H`` numbers.  Splitting the hidden axis ``k`` ways
splits each of them along ``H`` (by columns for ``W_in`` and ``W_rec``, by rows for
``W_out``), so one device holds ``1/k`` of every matrix.

This module imports neither JAX nor BrainPy.
"""
from __future__ import annotations

__all__ = ["F32", "grad_bytes", "weight_bytes", "weight_count"]

F32 = 4     # bytes of a float32


# region: rnn.bytes
def weight_count(num_in: int, num_hid: int, num_out: int) -> int:
    """Numbers in ``W_in (I, H)``, ``W_rec (H, H)`` and ``W_out (H, O)``."""
    return (num_in + num_hid + num_out) * num_hid


def weight_bytes(num_in: int, num_hid: int, num_out: int, hidden_shards: int = 1,
                 itemsize: int = F32) -> int:
    """Bytes of the weights on ONE device when ``hidden_shards`` devices split ``H``."""
    if hidden_shards < 1 or num_hid % hidden_shards:
        raise ValueError(f"hidden_shards={hidden_shards} does not divide the hidden "
                         f"size {num_hid}")
    return weight_count(num_in, num_hid, num_out) * itemsize // hidden_shards
# endregion


def grad_bytes(num_in: int, num_hid: int, num_out: int, hidden_shards: int = 1,
               loss: bool = True) -> int:
    """Bytes a gradient all-reduce moves: the weight gradients (float32) on one
    device, plus the 4-byte loss when it is reduced in the same collective."""
    return weight_bytes(num_in, num_hid, num_out, hidden_shards) + (F32 if loss else 0)
