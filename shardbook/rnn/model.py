"""The RNN of the BrainPy sharding discussion, written for BrainPy 2.8.2.

    h_t = tanh(x_t @ W_in + h_{t-1} @ W_rec),      y_t = h_t @ W_out

The discussion ("multiple GPU devices simulation and training of one dynamic system in
brainpy") split it over two GPUs by naming the hidden axis.  Its mistakes are fixed
here: ``bp.init.variable`` is called with keywords, each device creates only its own
block of the weights (``bp.init.parameter(..., sharding=...)``), and the state keeps its
sharding when reset, at the start of every step.

Axis names (``'batch'``, ``'hidden'``) are resolved when the model is built inside
``bm.sharding.device_mesh(devices, names)``: a name in the mesh splits that dimension,
any other is replicated.  So one class serves one device, a ``'hidden'`` mesh, a
``'batch'`` mesh and both.  Import only after :func:`shardbook.book.setup_devices`
(importing BrainPy starts JAX).
"""
from __future__ import annotations

import warnings

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import brainpy as bp
import brainpy.math as bm

__all__ = [
    "RNN",
    "make_grad_fn",
    "make_loss_fn",
    "make_task",
    "make_train_step",
    "params_of",
    "settle_layouts",
    "shard_batch",
    "train",
]

# BrainPy warns when *none* of an array's axis names is in the mesh: intended for the
# weights on a batch-only mesh (data parallelism replicates them), so RNN silences it.
_ALL_NAMES_MISSING = r"None of the requested axis names"


class RNN(bp.DynamicalSystem):
    """A vanilla RNN whose hidden dimension can be split across devices.

    ``num_hid`` must divide by the mesh's ``'hidden'`` axis, ``batch_size`` (the
    state's) by its ``'batch'`` axis.  ``mode`` defaults to ``bm.training_mode``, which
    ``bp.DSTrainer`` requires.  ``annotate`` says which arrays carry axis names (else
    ``ValueError``): ``"all"``: the state ``('batch', 'hidden')``, ``W_in`` and
    ``W_rec`` ``(None, 'hidden')``, ``W_out`` ``('hidden', None)``; ``"state"``: only
    the state (the discussion's "enough"); ``"none"``: nothing.  The same ``seed``
    gives the same weights on any mesh."""

    def __init__(self, num_in: int, num_hid: int, num_out: int, batch_size: int, *,
                 mode=None, annotate: str = "all", seed: int = 0):
        super().__init__(mode=bm.training_mode if mode is None else mode)
        if annotate not in ("all", "state", "none"):
            raise ValueError(
                f"annotate must be 'all', 'state' or 'none', got {annotate!r}")
        self.num_in, self.num_hid, self.num_out = num_in, num_hid, num_out
        self.batch_size = batch_size
        self.annotate = annotate

        # region: rnn.state
        # The hidden state, shape (batch, hidden).  KEYWORDS: variable() takes
        # (init, batch_or_mode, sizes); variable_() takes (init, sizes, batch_or_mode).
        named = annotate in ("all", "state")
        self.state = bp.init.variable(
            bm.zeros,
            batch_or_mode=batch_size,
            sizes=num_hid,
            axis_names=["hidden"] if named else None,
            batch_axis_name="batch" if named else None,
        )
        # endregion
        # so that reset_state() puts new zeros where the old ones were
        sharding = self.state.value.sharding
        self._state_sharding = sharding if isinstance(sharding, NamedSharding) else None

        # Weights: N(0, 1/fan_in), so that x @ W keeps unit variance.
        w = annotate == "all"
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_ALL_NAMES_MISSING,
                                    category=UserWarning)
            self.win = bm.TrainVar(bp.init.parameter(
                bp.init.Normal(scale=1 / np.sqrt(num_in), seed=seed),
                (num_in, num_hid), sharding=[None, "hidden"] if w else None))
            self.wrec = bm.TrainVar(bp.init.parameter(
                bp.init.Normal(scale=1 / np.sqrt(num_hid), seed=seed + 1),
                (num_hid, num_hid), sharding=[None, "hidden"] if w else None))
            self.wout = bm.TrainVar(bp.init.parameter(
                bp.init.Normal(scale=1 / np.sqrt(num_hid), seed=seed + 2),
                (num_hid, num_out), sharding=["hidden", None] if w else None))

    def reset_state(self, batch_size: int | None = None):
        """Zero the hidden state, keeping its sharding (also inside ``jit``)."""
        batch_size = self.batch_size if batch_size is None else batch_size
        zeros = bm.zeros((batch_size, self.num_hid), dtype=self.state.dtype)
        if self._state_sharding is not None:
            # inside jit, new zeros have no layout of their own: say which one
            zeros = jax.lax.with_sharding_constraint(bm.as_jax(zeros),
                                                     self._state_sharding)
        self.state.value = zeros

    @property
    def state_sharding(self) -> NamedSharding | None:
        """The layout :meth:`reset_state` gives new zeros (``None``: no mesh)."""
        return self._state_sharding

    @state_sharding.setter
    def state_sharding(self, sharding: NamedSharding | None):
        if sharding is not None and not isinstance(sharding, NamedSharding):
            raise TypeError(f"state_sharding must be a NamedSharding or None, got "
                            f"{type(sharding).__name__}")
        self._state_sharding = sharding

    def use_mesh(self, mesh) -> None:
        """Reset the state onto ``mesh`` from now on, with the same ``PartitionSpec``.

        For compiling the step for another mesh (``shardbook.gputarget``):
        ``reset_state`` runs inside the traced step and must name that mesh.  Raises
        ``ValueError`` if ``mesh`` lacks one of the state's axis names."""
        if self._state_sharding is None:
            return
        missing = set(self._state_sharding.mesh.axis_names) - set(mesh.axis_names)
        if missing:
            raise ValueError(f"mesh {dict(mesh.shape)} lacks the state's axes "
                             f"{sorted(missing)}")
        self._state_sharding = NamedSharding(mesh, self._state_sharding.spec)

    def update(self, x):
        """One time step: ``x`` is (batch, num_in); returns (batch, num_out)."""
        self.state.value = bm.tanh(x @ self.win + self.state @ self.wrec)
        return self.state @ self.wout


def make_task(batch: int, time: int, num_in: int, num_out: int, seed: int = 0):
    """A small, learnable sequence task: track leaky integrals of sine-wave inputs.

    Each sample gets ``num_in`` sine waves of random frequency and phase; each output
    is a leaky integral (time constant 10 steps) of a fixed random mix of them, scaled
    to unit size.  Returns ``xs`` (batch, time, num_in) and ``ys`` (batch, time,
    num_out), float32 numpy arrays, the same for the same arguments on any machine."""
    rng = np.random.default_rng(seed)
    t = np.arange(time, dtype=np.float64)
    freq = rng.uniform(0.02, 0.1, size=(batch, 1, num_in))
    phase = rng.uniform(0, 2 * np.pi, size=(batch, 1, num_in))
    xs = np.sin(2 * np.pi * freq * t[None, :, None] + phase)
    mix = rng.normal(size=(num_in, num_out)) / np.sqrt(num_in)
    drive = xs @ mix
    ys = np.zeros_like(drive)
    acc = np.zeros((batch, num_out))
    for i in range(time):
        acc = 0.9 * acc + 0.1 * drive[:, i]
        ys[:, i] = acc
    ys /= ys.std() + 1e-12
    return xs.astype(np.float32), ys.astype(np.float32)


def make_loss_fn(model: RNN):
    """``loss(xs, ys)``: mean squared error of the model run over the whole sequence
    (``bp.DSTrainer.predict``, state reset first)."""
    # region: rnn.loss
    def loss_fn(xs, ys):
        runner = bp.DSTrainer(model, progress_bar=False, numpy_mon_after_run=False)
        predictions = runner.predict(xs, reset_state=True)
        return bp.losses.mean_squared_error(predictions, ys)
    # endregion

    return loss_fn


def make_grad_fn(model: RNN):
    """``grads(xs, ys) -> ({'win': ..., 'wrec': ..., 'wout': ...}, loss)``, jitted.

    The gradient with no update: Adam's first step is about ``lr * sign(g)``, blind to
    a gradient off by a constant factor (a missing or doubled ``psum``)."""
    weights = [model.win, model.wrec, model.wout]
    grad_fn = bm.grad(make_loss_fn(model), grad_vars=weights, return_value=True)

    @bm.jit
    def grads(xs, ys):
        g, loss = grad_fn(xs, ys)
        return dict(zip(("win", "wrec", "wout"), g)), loss

    return grads


# After one step, jit hands back Adam's scalar step counter (made on the default
# device) replicated on the mesh: a new input layout, so the step compiles again.
# It also respells P('hidden', None) as P('hidden',), which costs nothing (JAX keys
# equivalent specs alike; tests/test_ch3_parallelism.py counts both).  We give every
# variable its after-step layout now, and the step compiles only once.
def settle_layouts(variables, mesh, scalars: bool = True, specs: bool = True):
    """Both fixes by default; tests/test_ch3_parallelism.py tries each alone."""
    for var in variables:
        if var.ndim == 0 and scalars:
            spec = P()
        elif var.ndim and specs and isinstance(var.value.sharding, NamedSharding):
            spec = var.value.sharding.spec
            while len(spec) and spec[-1] is None:  # drop trailing Nones
                spec = P(*spec[:-1])
        else:  # leave unannotated arrays alone (see annotate="state")
            continue
        var.value = jax.device_put(var.value, NamedSharding(mesh, spec))


def make_train_step(model: RNN, lr: float = 1e-3):
    """One jitted training step ``step(xs, ys) -> loss`` (BPTT with Adam).

    ``bm.grad`` of :func:`make_loss_fn` over the model's ``TrainVar``s and the update
    compile into one ``bm.jit`` program, where sharding takes effect.  The step has
    ``.optimizer`` (the ``bp.optim.Adam``), ``.loss_fn`` and ``.lower(xs, ys)``."""
    # region: rnn.step.grad
    train_vars = model.train_vars().unique()
    loss_fn = make_loss_fn(model)
    grad_fn = bm.grad(loss_fn, grad_vars=train_vars, return_value=True)
    optimizer = bp.optim.Adam(lr=lr, train_vars=train_vars)
    # endregion
    mesh = getattr(model.state.value.sharding, "mesh", None)
    if mesh is not None:
        states = model.vars().unique().values(), optimizer.vars().unique().values()
        settle_layouts([var for group in states for var in group], mesh)

    # region: rnn.step.jit
    @bm.jit
    def step(xs, ys):
        grads, loss = grad_fn(xs, ys)
        optimizer.update(grads)
        return loss
    # endregion

    step.optimizer = optimizer
    step.loss_fn = loss_fn
    return step


def train(model: RNN, xs, ys, steps: int, lr: float = 1e-3, step=None) -> np.ndarray:
    """Run ``steps`` training steps and return the losses as a float32 array."""
    step = make_train_step(model, lr) if step is None else step
    return np.array([float(step(xs, ys)) for _ in range(steps)], dtype=np.float32)


def shard_batch(x, mesh):
    """Put a (batch, ...) data array on ``mesh``: split by ``'batch'`` if the mesh has
    it, else replicated on every device of the mesh."""
    spec = P("batch") if "batch" in mesh.axis_names else P()
    return jax.device_put(np.asarray(x), NamedSharding(mesh, spec))


def params_of(model: RNN) -> dict:
    """The model's weights as plain ``jax.Array``\\ s, layouts kept:
    ``{'win', 'wrec', 'wout'}`` (the arguments of :mod:`shardbook.rnn.pure`)."""
    return {k: bm.as_jax(getattr(model, k).value) for k in ("win", "wrec", "wout")}
