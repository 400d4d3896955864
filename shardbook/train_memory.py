"""One memory model for training the book's RNN with Adam, with and without donation.

Chapters 2 and 3 both ask "how many bytes does one training step hold on one
device?".  This module answers it once.  Write ``P`` for the bytes of the weights a
device holds (``4 (I + H + O) H`` in float32, divided by the number of devices that
split them).  Then one step of Adam (BrainPy's ``bp.optim.Adam``; Kingma and Ba, 2015)
needs

* the weights, ``P``; the gradients, ``P``; the two moments ``m`` and ``v``, ``2P``.
  These four are live together while the update runs: **4P is the least any
  implementation needs** (chapter 2's count);
* the activations that backpropagation through time keeps from the forward loop for
  the backward loop: three ``(T, B_d, H_d)`` float32 arrays (the pre-activation
  input, ``h_{t-1}`` and ``h_t``; chapter 3 reads them off the compiled ``while``
  loop), where ``B_d`` and ``H_d`` are this device's batch and hidden sizes;
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

:func:`predict` gives the exact rows (arguments, outputs, aliased) and a bound for the
temporaries; :func:`check` compares them with a compiled program.  The tests in
``tests/test_train_memory.py`` compile both kinds of step at several device counts.

Only the exact rows are claims about every XLA backend.  The temporaries are what
XLA:CPU's buffer assignment does; a GPU compiler may do better or worse.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TrainBytes", "predict", "check", "functional_step", "adam_init",
           "params_of", "weight_count"]

F32 = 4
COUNTER = 4     # Adam's step counter t (int32)
LOSS = 4        # the scalar loss (float32)


def weight_count(num_in: int, num_hid: int, num_out: int) -> int:
    """Numbers in ``W_in (I, H)``, ``W_rec (H, H)`` and ``W_out (H, O)``."""
    return (num_in + num_hid + num_out) * num_hid


@dataclass(frozen=True)
class TrainBytes:
    """Predicted bytes on ONE device for one Adam training step of the RNN."""

    weights: float        # P
    grads: float          # P
    adam: float           # 2P (m and v)
    activations: float    # 3 (T, B_d, H_d) arrays kept for BPTT
    data: float           # xs and ys on this device
    state: float          # the hidden state (B_d, H_d); an output of bm.jit only
    arguments: float      # exact
    outputs: float        # exact
    aliased: float        # exact: 3P + counter when donated, else 0
    temporaries: float    # an upper bound (XLA:CPU), see the module docstring
    donate: bool

    @property
    def total(self) -> float:
        """``arguments + outputs - aliased + temporaries``: the peak one device holds."""
        return self.arguments + self.outputs - self.aliased + self.temporaries

    @property
    def minimum(self) -> float:
        """Weights, gradients and both moments: 4P, the least any implementation needs."""
        return self.weights + self.grads + self.adam


def predict(num_in: int, num_hid: int, num_out: int, batch: int, time: int, *,
            hidden_shards: int = 1, batch_shards: int = 1, param_shards: int = 1,
            donate: bool = False, bm_jit: bool = True, itemsize: int = F32) -> TrainBytes:
    """Bytes on one device for one training step.

    ``hidden_shards`` devices split the hidden axis (model parallelism, weights and
    state split); ``batch_shards`` split the batch (data parallelism: data, state and
    activations split); ``param_shards`` additionally split the stored weights and
    Adam moments without splitting the computation (FSDP / ZeRO-3: the forward pass
    gathers them).  ``bm_jit=True`` describes the book's ``make_train_step`` (its
    outputs include the hidden state and its arguments include nothing else);
    ``bm_jit=False`` the pure step of :func:`functional_step`.
    """
    for name, k, size in (("hidden_shards", hidden_shards, num_hid),
                          ("batch_shards", batch_shards, batch)):
        if k < 1 or size % k:
            raise ValueError(f"{name}={k} does not divide the size {size}")
    if bm_jit and donate:
        raise ValueError("bm.jit cannot donate the model's states (brainstate passes them as "
                         "a hidden first argument); use functional_step for donation")
    h_d, b_d = num_hid // hidden_shards, batch // batch_shards
    P = weight_count(num_in, num_hid, num_out) * itemsize / (hidden_shards * param_shards)
    activations = 3 * time * b_d * h_d * itemsize
    data = b_d * time * (num_in + num_out) * itemsize
    state = b_d * h_d * itemsize
    arguments = P + 2 * P + COUNTER + data
    outputs = P + 2 * P + COUNTER + LOSS + (state if bm_jit else 0)
    aliased = (3 * P + COUNTER) if donate else 0
    # temporaries (XLA:CPU, measured): the activations; when donated, two more
    # gradient-sized buffers (three under data parallelism: the all-reduced gradients);
    # under FSDP the gathered weights and whole gradients (XLA:CPU: about 4 W).  10% slack plus 64 KiB for small buffers.
    extra = (2 + (batch_shards > 1)) * P if donate else 0.0
    gathered = 0.0 if param_shards == 1 else 4 * P * param_shards
    temporaries = 1.1 * (activations + extra + gathered) + 65536
    return TrainBytes(weights=P, grads=P, adam=2 * P, activations=activations, data=data,
                      state=state, arguments=arguments, outputs=outputs, aliased=aliased,
                      temporaries=temporaries, donate=donate)


def check(predicted: TrainBytes, compiled, *, rtol: float = 1e-3,
          temporaries: bool | None = None) -> dict:
    """Compare ``predicted`` with ``compiled.memory_analysis()``; raise AssertionError.

    Arguments, outputs and aliased bytes must match within ``rtol`` (a few scalars of
    BrainPy bookkeeping, such as the learning-rate Variable, are allowed for) on any
    platform.  Temporaries must stay under the bound, which describes XLA:CPU; by default
    (``temporaries=None``) that row is checked only when JAX's default backend is the
    CPU (a GPU compiler keeps other temporaries).  Returns the measured dict.
    """
    from .memory import compiled_memory

    if temporaries is None:
        import jax

        temporaries = jax.default_backend() == "cpu"

    m = compiled_memory(compiled)
    bad = []
    for key in ("arguments", "outputs", "aliased"):
        p = getattr(predicted, key)
        if abs(m[key] - p) > rtol * max(p, 1.0) + 16:
            bad.append(f"{key}: predicted {p:,.0f}, measured {m[key]:,}")
    if temporaries and m["temporaries"] > predicted.temporaries:
        bad.append(f"temporaries: measured {m['temporaries']:,} above the bound "
                   f"{predicted.temporaries:,.0f}")
    assert not bad, "train memory model disagrees with memory_analysis():\n  " + "\n  ".join(bad)
    return m


# ----------------------------------------------------------------------------------
# A pure training step (same mathematics as shardbook.models.make_train_step), which
# jax.jit can donate.  Imports JAX lazily: import shardbook only after setup_devices.
# ----------------------------------------------------------------------------------

def params_of(model) -> dict:
    """The RNN's weights as plain ``jax.Array``s (layouts kept): ``{'win', 'wrec', 'wout'}``."""
    import brainpy.math as bm

    return {k: bm.as_jax(getattr(model, k).value) for k in ("win", "wrec", "wout")}


def adam_init(params: dict) -> dict:
    """Adam's state for ``params``: moments ``m``, ``v`` (same layouts) and counter ``t``."""
    import jax.numpy as jnp

    return dict(m={k: jnp.zeros_like(v) for k, v in params.items()},
                v={k: jnp.zeros_like(v) for k, v in params.items()},
                t=jnp.zeros((), jnp.int32))


def _loss(params, xs, ys):
    import jax
    import jax.numpy as jnp

    h0 = jnp.zeros((xs.shape[0], params["wrec"].shape[0]), xs.dtype)

    def body(h, x):
        h = jnp.tanh(x @ params["win"] + h @ params["wrec"])
        return h, h @ params["wout"]

    _, y = jax.lax.scan(body, h0, jnp.swapaxes(xs, 0, 1))
    return jnp.mean((jnp.swapaxes(y, 0, 1) - ys) ** 2)


def functional_step(lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                    eps: float = 1e-8, donate: bool = False):
    """``step(params, opt, xs, ys) -> (params, opt, loss)`` under ``jax.jit``.

    The RNN of ``shardbook.models`` and BrainPy's Adam (learning rate scaled by
    ``sqrt(1 - beta2^t) / (1 - beta1^t)``), written as a pure function so that
    ``donate=True`` can hand the old weights and moments to the new ones
    (``donate_argnums=(0, 1)``).  After a donated call the old arrays are deleted.
    """
    import jax
    import jax.numpy as jnp

    def step(params, opt, xs, ys):
        loss, g = jax.value_and_grad(_loss)(params, xs, ys)
        t = opt["t"] + 1
        a = lr / (1 - beta1 ** t) * jnp.sqrt(1 - beta2 ** t)
        m = {k: beta1 * opt["m"][k] + (1 - beta1) * g[k] for k in g}
        v = {k: beta2 * opt["v"][k] + (1 - beta2) * g[k] ** 2 for k in g}
        new = {k: params[k] - a * m[k] / (jnp.sqrt(v[k]) + eps) for k in g}
        return new, dict(m=m, v=v, t=t), loss

    return jax.jit(step, donate_argnums=(0, 1) if donate else ())
