"""One memory model for training the book's RNN with Adam: its steps and variants.

Write ``P`` for the bytes of the weights one device holds (``4 (I + H + O) H`` in
float32, divided by the devices that split them).  One Adam step holds, per device:

* weights ``P``, gradients ``P``, moments ``m`` and ``v`` ``2P``, live together during
  the update: **4P is the least any implementation needs**;
* the activations backpropagation through time keeps: per step three ``(B_d, H_d)``
  arrays (``h_{t-1}``, ``h_t`` and ``1 - h_t``, for tanh's derivative), ``B_d`` and
  ``H_d`` being this device's batch and hidden sizes;
* :attr:`TrainBytes.kept_data`: the inputs time-first, ``(T, B_d, I)`` in the compute
  dtype, and the loss's ``2 (y - ys)``, ``(B_d, T, O)`` in float32;
* under the hidden split, :attr:`TrainBytes.gathered_state`: the state gathered whole
  for one step, ``(B_d, H)``, and its cotangent; it does not shrink with the split;
* the data, the hidden state, Adam's step counter and the loss.

Not donated (``bm.jit`` always: brainstate passes the states as a hidden first
argument), old and new weights and moments make ``arguments + outputs`` **6P**, and XLA
writes the gradients into the outputs.  Donated (``jax.jit(step, donate_argnums=(0,
1))``), the new values alias the old, but the gradients cannot go into outputs still
being read: XLA:CPU holds about **5P** in all (6P with data parallelism).  ``remat``
keeps one activation array per step instead of three, ``micro_batches=k`` those of
B_d / k samples (plus two gradient-sized buffers), bf16 keeps them in 2 bytes (plus a
P / 2 bf16 copy of the weights).

:func:`predict` gives the exact rows (arguments, outputs, aliased, saved activations)
and a bound for the temporaries, which are one compiler's buffer assignment: their
constants are the ``"train.temporaries"`` entry of ``expectations.toml``, per compiler.
:func:`check` compares a prediction with a compiled program.  This module imports
neither JAX nor BrainPy at import time.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .rnn.sizes import F32, weight_count

__all__ = [
    "REMAT_RESIDUALS",
    "RESIDUALS",
    "TrainBytes",
    "check",
    "compiler_of",
    "kept_temporaries",
    "predict",
    "saved_activations",
    "saved_residuals",
    "temporaries_bound",
]

COUNTER = 4     # Adam's step counter t (int32)
LOSS = 4        # the scalar loss (float32)
RESIDUALS = 3   # (B_d, H_d) arrays per time step that backpropagation keeps
REMAT_RESIDUALS = 1   # ... with the scan body rematerialised: only h_{t-1}
EXPECTATION = "train.temporaries"
_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class TrainBytes:
    """Predicted bytes on ONE device for one Adam training step of the RNN."""

    weights: float        # P
    grads: float          # P
    adam: float           # 2P (m and v)
    activations: float    # what backpropagation keeps: residuals x (T, B_d/k, H_d)
    data: float           # xs and ys on this device
    state: float          # the hidden state (B_d, H_d); an output of bm.jit only
    arguments: float      # exact
    outputs: float        # exact
    aliased: float        # exact: 3P + counter when donated, else 0
    temporaries: float | None   # an upper bound for `compiler` (None: not asked)
    donate: bool
    residuals: int = RESIDUALS  # activation arrays kept per time step
    micro_batches: int = 1
    act_itemsize: int = F32     # bytes of one saved activation number
    batch_split: bool = False   # data parallelism: gradients all-reduced
    param_shards: int = 1       # FSDP: stored weights split this many more ways
    compiler: str | None = "cpu"  # whose temporaries bound `temporaries` is
    kept_data: float = 0.0   # exact: the (T, B_d/k, I) and (B_d/k, T, O) residuals
    gathered_state: float = 0.0  # exact: (B_d/k, H), gathered for one step (hidden)

    @property
    def total(self) -> float:
        """``arguments + outputs - aliased + temporaries``: one device's peak."""
        if self.temporaries is None:
            raise ValueError("no temporaries bound: predict(..., compiler=None)")
        return self.arguments + self.outputs - self.aliased + self.temporaries

    @property
    def minimum(self) -> float:
        """Weights, gradients and both moments: 4P, the least any step needs."""
        return self.weights + self.grads + self.adam


def _itemsize(dtype) -> int:
    if dtype is None:
        return F32
    name = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", str(dtype))
    if name not in _ITEMSIZE:
        import numpy as np

        return int(np.dtype(dtype).itemsize)
    return _ITEMSIZE[name]


def predict(num_in: int, num_hid: int, num_out: int, batch: int, time: int, *,
            hidden_shards: int = 1, batch_shards: int = 1, param_shards: int = 1,
            donate: bool = False, bm_jit: bool = True, itemsize: int = F32,
            remat: bool = False, micro_batches: int = 1, compute_dtype=None,
            compiler: str | None = "cpu") -> TrainBytes:
    """Bytes on one device for one training step.

    ``hidden_shards`` split the hidden axis (weights and state); ``batch_shards`` the
    batch (data, state, activations); ``param_shards`` further split the stored weights
    and moments only (FSDP: the forward pass gathers them).  ``bm_jit=True`` describes
    ``make_train_step`` (the hidden state is an output); ``bm_jit=False`` the pure
    :func:`shardbook.rnn.functional_step`, with ``remat``, ``micro_batches`` and
    ``compute_dtype`` (``"bfloat16"``).  ``compiler``: whose temporaries bound to fill
    in (:func:`temporaries_bound`; ``None``: none).  ``ValueError`` for a count that
    does not divide its size, or an option ``bm.jit`` lacks."""
    for name, k, size in (("hidden_shards", hidden_shards, num_hid),
                          ("batch_shards", batch_shards, batch)):
        if k < 1 or size % k:
            raise ValueError(f"{name}={k} does not divide the size {size}")
    if bm_jit and donate:
        raise ValueError("bm.jit cannot donate the model's states (brainstate passes "
                         "them as a hidden first argument); use functional_step for "
                         "donation")
    if bm_jit and (remat or micro_batches != 1 or compute_dtype is not None):
        raise ValueError("remat, micro_batches and compute_dtype are options of the "
                         "pure step: predict(..., bm_jit=False)")
    h_d, b_d = num_hid // hidden_shards, batch // batch_shards
    if micro_batches < 1 or b_d % micro_batches:
        raise ValueError(f"micro_batches={micro_batches} does not divide this device's "
                         f"batch {b_d}")
    P = (weight_count(num_in, num_hid, num_out) * itemsize
         / (hidden_shards * param_shards))
    residuals = REMAT_RESIDUALS if remat else RESIDUALS
    act_itemsize = _itemsize(compute_dtype)
    activations = residuals * time * (b_d // micro_batches) * h_d * act_itemsize
    data = b_d * time * (num_in + num_out) * itemsize
    kept_data = (b_d // micro_batches) * time * (num_in * act_itemsize + num_out * F32)
    state = b_d * h_d * itemsize
    gathered_state = ((b_d // micro_batches) * num_hid * itemsize
                      if hidden_shards > 1 else 0)
    arguments = P + 2 * P + COUNTER + data
    outputs = P + 2 * P + COUNTER + LOSS + (state if bm_jit else 0)
    aliased = (3 * P + COUNTER) if donate else 0
    p = TrainBytes(weights=P, grads=P, adam=2 * P, activations=activations, data=data,
                   state=state, arguments=arguments, outputs=outputs, aliased=aliased,
                   temporaries=None, donate=donate, residuals=residuals,
                   micro_batches=micro_batches, act_itemsize=act_itemsize,
                   batch_split=batch_shards > 1, param_shards=param_shards,
                   compiler=compiler, kept_data=kept_data,
                   gathered_state=gathered_state)
    if compiler is not None:
        p = replace(p, temporaries=temporaries_bound(p, compiler))
    return p


def temporaries_bound(p: TrainBytes, compiler: str,
                      constants: dict | None = None) -> float:
    """The bound on ``p``'s temporaries for ``compiler``, from the expectations table.

    ``slack * (kept_temporaries + extra * P + gathered) + small_buffers``: ``extra``
    counts the gradient-sized buffers of donation, accumulation and bf16 weights,
    ``gathered`` FSDP's gathered weights.  ``constants`` (same keys) replaces the
    entry's.  Raises ``shardbook.expect.ExpectationMissing`` when the table has none."""
    from . import expect

    c = expect.parameters(EXPECTATION, compiler) if constants is None else constants
    P = p.weights
    extra = 0.0
    if p.donate:
        extra += c["donated_grads_batch_split"] if p.batch_split else c["donated_grads"]
    if p.micro_batches > 1:
        extra += c["accumulate"]
    if p.act_itemsize < F32:
        extra += c["bf16_weights"]
    gathered = 0.0 if p.param_shards == 1 else c["fsdp_gathered"] * P * p.param_shards
    terms = kept_temporaries(p, compiler, c) + extra * P + gathered
    return c["slack"] * terms + c["small_buffers"]


def kept_temporaries(p: TrainBytes, compiler: str = "cpu",
                     constants: dict | None = None) -> float:
    """The temporaries of ``p`` that grow with the batch and the split: the saved
    activations (with float32 copies of bf16 ones) and the gathered state's buffers, no
    slack.  The ``rnn.train.memory`` entry holds where these stay below P (``kept=``).
    ``constants`` as in :func:`temporaries_bound`."""
    from . import expect

    c = expect.parameters(EXPECTATION, compiler) if constants is None else constants
    upcast = (c["bf16_upcast"] * p.activations * F32 / p.act_itemsize
              if p.act_itemsize < F32 else 0.0)
    return p.activations + upcast + c["state_buffers"] * p.gathered_state


def saved_activations(loss_fn, params, xs, ys) -> int:
    """Bytes of the per-step activations reverse-mode autodiff keeps for ``loss_fn``.

    The leaves of ``jax.vjp``'s function are the residuals; those of shape ``(T, B,
    H_d)`` are what :attr:`TrainBytes.activations` predicts.  Computed abstractly
    (``jax.eval_shape``): nothing runs."""
    import jax

    T, hidden = xs.shape[1], params["wrec"].shape[1]

    def residuals(p, x, y):
        return jax.tree.leaves(jax.vjp(lambda q: loss_fn(q, x, y), p)[1])

    return sum(r.size * r.dtype.itemsize
               for r in jax.eval_shape(residuals, params, xs, ys)
               if r.ndim == 3 and r.shape[0] == T and r.shape[-1] == hidden)


def saved_residuals(loss_fn, params, xs, ys) -> int:
    """Bytes of every per-step residual autodiff keeps: ``(T, B, H_d)`` and data-sized.

    As :func:`saved_activations`, counting every residual with ``T`` first or second:
    what :attr:`TrainBytes.activations` ``+`` :attr:`TrainBytes.kept_data` predicts.
    Kept weights are not counted (in float32 they are the argument buffers)."""
    import jax

    T = xs.shape[1]

    def residuals(p, x, y):
        return jax.tree.leaves(jax.vjp(lambda q: loss_fn(q, x, y), p)[1])

    return sum(r.size * r.dtype.itemsize
               for r in jax.eval_shape(residuals, params, xs, ys)
               if r.ndim == 3 and T in r.shape[:2])


def compiler_of(compiled) -> str | None:
    """``'cpu'`` or ``'gpu'``: the compiler of a compiled program, from its devices."""
    import jax

    for sharding in jax.tree_util.tree_leaves(compiled.input_shardings):
        for device in sharding.device_set:
            platform = device.platform.lower()
            return "gpu" if platform in ("gpu", "cuda", "rocm") else platform
    return None


def check(predicted: TrainBytes, compiled, *, rtol: float = 1e-3,
          temporaries: bool | None = None, floor: bool = False) -> dict:
    """Compare ``predicted`` with ``compiled.memory_analysis()``; raise AssertionError.

    Arguments, outputs and aliased bytes must match within ``rtol`` (plus 16 bytes for
    BrainPy scalars such as the learning rate) on any compiler.  Temporaries must stay
    under the bound of the program's own compiler (``predicted.temporaries`` if made
    for it, else the table's): ``temporaries=None`` checks where the table has an
    entry, ``True`` requires one, ``False`` skips.  ``floor=True`` also requires at
    least ``activations / 3``: the state of every step, which reverse mode keeps
    (XLA:GPU keeps about that much).  Returns the measured dict."""
    from .expect import ExpectationMissing
    from .memory import compiled_memory

    bound = None
    if temporaries is not False:
        compiler = compiler_of(compiled)
        if predicted.compiler == compiler and predicted.temporaries is not None:
            bound = predicted.temporaries
        else:
            try:
                bound = temporaries_bound(predicted, compiler)
            except ExpectationMissing:
                if temporaries:
                    raise
    m = compiled_memory(compiled)
    bad = []
    for key in ("arguments", "outputs", "aliased"):
        p = getattr(predicted, key)
        if abs(m[key] - p) > rtol * max(p, 1.0) + 16:
            bad.append(f"{key}: predicted {p:,.0f}, measured {m[key]:,}")
    if temporaries is not False and bound is not None and m["temporaries"] > bound:
        bad.append(f"temporaries: measured {m['temporaries']:,} above the bound "
                   f"{bound:,.0f}")
    if floor and m["temporaries"] < predicted.activations / 3:
        bad.append(f"temporaries: measured {m['temporaries']:,} below "
                   f"{predicted.activations / 3:,.0f}, the one state array per step "
                   "that reverse mode keeps")
    if bad:   # raised, not asserted: python -O would skip an assert
        raise AssertionError("train memory model disagrees with memory_analysis():\n  "
                             + "\n  ".join(bad))
    return m
