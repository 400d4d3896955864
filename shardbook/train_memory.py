"""One memory model for training the book's RNN with Adam: its steps and variants.

Chapters 2 and 3 both ask "how many bytes does one training step hold on one
device?".  This module answers it once.  Write ``P`` for the bytes of the weights a
device holds (``4 (I + H + O) H`` in float32, divided by the number of devices that
split them; :func:`shardbook.rnn.weight_bytes`).  Then one step of Adam (BrainPy's
``bp.optim.Adam``; Kingma and Ba, 2015) needs

* the weights, ``P``; the gradients, ``P``; the two moments ``m`` and ``v``, ``2P``.
  These four are live together while the update runs: **4P is the least any
  implementation needs** (chapter 2's count);
* the activations that backpropagation through time keeps from the forward loop for
  the backward loop: per time step, three ``(B_d, H_d)`` arrays (``h_{t-1}``, tanh's
  output ``h_t`` and ``1 - h_t``, from which JAX's derivative of tanh is built;
  chapter 3 reads them off the compiled ``while`` loop), where ``B_d`` and ``H_d``
  are this device's batch and hidden sizes;
* the data-sized arrays autodiff also keeps (:attr:`TrainBytes.kept_data`): the
  inputs transposed to time-first, ``(T, B_d, I)`` in the compute dtype, and the
  loss's residual ``2 (y - ys)``, ``(B_d, T, O)`` in float32.  They are small when
  ``I + O`` is small beside ``H``, not at the seed discussion's ``I = O = 1000``;
* under the hidden split, the state gathered whole for one step
  (:attr:`TrainBytes.gathered_state`, ``(B_d, H)``: the all-gather's result, and in
  the backward loop its cotangent before the reduce-scatter).  It does not shrink
  with the hidden split: at chapter 3's memory sizes it is a tenth of the
  activations on 8 devices (B = 8) and half of them on 32 (B = 32);
* the data ``xs`` and ``ys``, the hidden state, Adam's step counter and the loss.

What ``compiled.memory_analysis()`` reports depends on **donation** (JAX docs, "Buffer
donation"; ``jax.jit(..., donate_argnums=...)``):

* **Not donated** (``bm.jit`` always, because brainstate passes the states as a
  hidden first argument and shifts ``donate_argnums`` past it;
  ``brainstate/transform/_jit.py``): the old weights and moments are arguments and the
  new ones are outputs, so ``arguments + outputs`` holds **6P**.  XLA writes the
  gradients straight into the output buffers, so the temporaries hold little more
  than the activations.
* **Donated** (a pure step under ``jax.jit(step, donate_argnums=(0, 1))``): the new
  weights and moments reuse (alias) the argument buffers, so they count once, 3P.
  But now the gradients cannot be written into the outputs while the old values are
  still being read.  XLA:CPU's buffer assignment then needs about 2P more
  temporaries (3P under data parallelism, whose gradients are all-reduced):
  about **5P** in all (6P with data parallelism), not 4P.

Three ways to hold fewer activations on one device (``shardbook.rnn.pure``), each
predicted here before it is measured:

* **rematerialisation** (``remat=True``, ``jax.checkpoint`` on the scan body): the
  forward loop keeps only each step's input ``h_{t-1}``, one array per step instead
  of three; the backward loop recomputes the rest;
* **gradient accumulation** (``micro_batches=k``): the activations of B_d / k
  samples at a time, for two more gradient-sized buffers (the running sum and one
  micro-batch's gradient);
* **bf16 mixed precision** (``compute_dtype="bfloat16"``): the saved activations in
  2 bytes instead of 4, plus a bf16 copy of the weights (P / 2).

:func:`predict` gives the exact rows (arguments, outputs, aliased), the activations
backpropagation saves (exact: ``tests/`` count them from ``jax.vjp``'s residuals),
and a bound for the temporaries; :func:`check` compares them with a compiled
program.  Only the exact rows are claims about every XLA compiler.  The temporaries
are what one compiler's buffer assignment does: their constants are the entry
``"train.temporaries"`` of ``shardbook/expectations.toml``, per compiler (XLA:CPU,
for instance, has no bf16 arithmetic and converts the saved bf16 activations to
float32 before the backward loop, so bf16 saves no memory there).

This module imports neither JAX nor BrainPy at import time.
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

    ``hidden_shards`` devices split the hidden axis (model parallelism, weights and
    state split); ``batch_shards`` split the batch (data parallelism: data, state and
    activations split); ``param_shards`` additionally split the stored weights and
    Adam moments without splitting the computation (FSDP / ZeRO-3: the forward pass
    gathers them).  ``bm_jit=True`` describes the book's ``make_train_step`` (its
    outputs include the hidden state and its arguments include nothing else);
    ``bm_jit=False`` the pure step of :func:`shardbook.rnn.functional_step`, with
    its options ``remat``, ``micro_batches`` and ``compute_dtype`` (``"bfloat16"``).
    ``compiler``: whose bound on the temporaries to fill in (:func:`temporaries_bound`;
    XLA:CPU by default, the compiler the table's constants describe; ``None``:
    none).  :func:`check` uses the bound of the compiled program's own compiler.
    """
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

    ``slack * (kept_temporaries + extra * P + gathered) + small_buffers``: the kept
    temporaries (:func:`kept_temporaries`), the gradient-sized buffers of donation,
    accumulation and bf16 weights (``extra``), FSDP's gathered weights, with the
    constants of the ``"train.temporaries"`` entry for that compiler.  ``constants``
    (the same keys: a test plants a changed one) replaces the entry's, and then
    ``compiler`` is not read.  Raises
    ``shardbook.expect.ExpectationMissing`` when the table has none.
    """
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
    """The temporaries of ``p`` that grow with the per-device batch and the split: the
    saved activations (float32 copies of bf16 ones included) and the gathered state's
    buffers, without the bound's slack or its fixed buffers.  The premise of the
    ``rnn.train.memory`` entry: it holds where these stay below P (``kept=``).
    ``constants`` replaces the entry's, as in :func:`temporaries_bound`."""
    from . import expect

    c = expect.parameters(EXPECTATION, compiler) if constants is None else constants
    upcast = (c["bf16_upcast"] * p.activations * F32 / p.act_itemsize
              if p.act_itemsize < F32 else 0.0)
    return p.activations + upcast + c["state_buffers"] * p.gathered_state


def saved_activations(loss_fn, params, xs, ys) -> int:
    """Bytes of the per-step activations reverse-mode autodiff keeps for ``loss_fn``.

    The function ``jax.vjp`` returns is a ``jax.tree_util.Partial`` whose leaves are
    the residuals, the values ``jax.ad_checkpoint.print_saved_residuals`` lists (JAX
    docs, "Gradient checkpointing with jax.checkpoint").  Those of shape
    ``(T, B, H_d)`` are what :attr:`TrainBytes.activations` predicts, before any
    compiler sees the program.  Computed abstractly (``jax.eval_shape``): nothing runs.
    """
    import jax

    T, hidden = xs.shape[1], params["wrec"].shape[1]

    def residuals(p, x, y):
        return jax.tree.leaves(jax.vjp(lambda q: loss_fn(q, x, y), p)[1])

    return sum(r.size * r.dtype.itemsize
               for r in jax.eval_shape(residuals, params, xs, ys)
               if r.ndim == 3 and r.shape[0] == T and r.shape[-1] == hidden)


def saved_residuals(loss_fn, params, xs, ys) -> int:
    """Bytes of every per-step residual autodiff keeps: ``(T, B, H_d)`` and data-sized.

    As :func:`saved_activations`, but counting each residual with a time axis (``T``
    first or second): the activations plus the transposed inputs ``(T, B, I)`` and
    the loss's residual ``(B, T, O)``, what :attr:`TrainBytes.activations` ``+``
    :attr:`TrainBytes.kept_data` predicts.  The weights autodiff keeps are not
    counted (in float32 they are the argument buffers themselves).
    """
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

    Arguments, outputs and aliased bytes must match within ``rtol`` (a few scalars of
    BrainPy bookkeeping, such as the learning-rate Variable, are allowed for) on any
    compiler.  Temporaries must stay under the bound of the program's own compiler:
    ``predicted.temporaries`` if it was made for that compiler, else the
    expectations table's entry for it.  ``temporaries=None`` checks that row where
    the table has an entry for the compiler and skips it elsewhere; ``True``
    requires it; ``False`` skips it.  ``floor=True`` also bounds them from below, on
    any compiler: they hold at least one of the three ``(T, B, H/k)`` activation
    arrays, the state of every step that reverse mode keeps (tanh's derivative is
    computed from it; XLA:CPU keeps about two of the three; XLA:GPU, 0.34 times the
    three together, about one, ``rnn.hidden.temporaries``, so the floor is close there),
    so a model that predicts far too much fails too.
    Returns the measured dict.
    """
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
    assert not bad, ("train memory model disagrees with memory_analysis():\n  "
                     + "\n  ".join(bad))
    return m
