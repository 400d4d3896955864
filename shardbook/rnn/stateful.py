"""Chapter 3's hidden split with brainstate states and its ``shard_map``.

BrainPy 2.9 moves models onto ``brainpy.state``, built on brainstate; brainstate 0.5.4
(installed with BrainPy 2.8.2) already has a state-aware ``shard_map``
(``brainstate/transform/_shard_map.py``): states are split by ``state_in_specs`` and
``state_out_specs`` (replicated by default), positional arguments by ``in_specs``.

:class:`StateRNN` keeps the RNN's weights as ``brainstate.ParamState`` and its hidden
state as a ``brainstate.HiddenState``, each split over the ``'hidden'`` axis as
chapter 3 splits them.  One time step is :func:`shardbook.rnn.pure.cell`, the same
step as every other version of the model, with the recurrence :class:`StateSplit`.

Two things that work under ``jax.shard_map`` raise under brainstate's, because the
wrapper first traces the function once at the *global* shapes (outside the manual
axes, with only an axis environment) to find the states it touches:

* ``jax.lax.pcast(h0, axis, to="varying")`` on new zeros raises ``AssertionError:
  ManualAxisType(varying=frozenset({'hidden'}), ...)``; zeros made from the split
  state itself (``jnp.zeros_like(h.value)``) are varying already.
* a tiled ``all_gather`` of ``h_{t-1}`` there is ``k`` times too wide, so
  ``h_all @ W_rec`` raises ``TypeError: dot_general requires contracting dimensions
  to have the same shape``; :class:`StateSplit` cuts ``h_all`` to ``W_rec``'s rows,
  which changes nothing at the per-device shapes.

``tests/test_rnn_variants.py`` checks both, and that the gradients equal those of the
``bm.sharding`` model.  Import this module only after
:func:`shardbook.book.setup_devices`.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import brainstate

from .pure import NAMES, HiddenSplit, cell, hidden_specs, own_block_only

__all__ = ["StateRNN", "StateSplit", "stateful_grad_fn"]


@dataclass(frozen=True)
class StateSplit(HiddenSplit):
    """:class:`HiddenSplit` for brainstate's ``shard_map`` (see the module text)."""

    def start(self, h0):
        return h0                                 # varying already: the split state

    def recur(self, h, wrec):
        if self.gather:
            h_all = jax.lax.all_gather(h, self.axis, axis=1, tiled=True)
        else:
            h_all = own_block_only(h, self.axis)  # the planted bug
        return h_all[:, : wrec.shape[0]] @ wrec   # a no-op on one device's block


class StateRNN:
    """The RNN's weights and hidden state as brainstate states split over ``axis``.

    ``params``: the weights ``{'win', 'wrec', 'wout'}`` (for instance
    :func:`shardbook.rnn.params_of` of a one-device model), placed on ``mesh`` as
    :func:`shardbook.rnn.pure.hidden_specs`; the state ``(batch, H)`` as
    ``P(None, axis)``.
    """

    def __init__(self, params: dict, batch: int, mesh, axis: str = "hidden"):
        self.mesh, self.axis = mesh, axis
        specs = hidden_specs(axis)

        def put(x, spec):
            return jax.device_put(x, NamedSharding(mesh, spec))

        self.win = brainstate.ParamState(put(params["win"], specs["win"]))
        self.wrec = brainstate.ParamState(put(params["wrec"], specs["wrec"]))
        self.wout = brainstate.ParamState(put(params["wout"], specs["wout"]))
        hidden = params["wrec"].shape[0]
        self.h = brainstate.HiddenState(put(jnp.zeros((batch, hidden)), P(None, axis)))

    @property
    def weights(self) -> dict:
        """The three weight states, by name."""
        return {k: getattr(self, k) for k in NAMES}

    def state_specs(self) -> dict:
        """``{state: PartitionSpec}`` for ``state_in_specs`` and ``state_out_specs``."""
        specs = hidden_specs(self.axis)
        return {**{getattr(self, k): specs[k] for k in NAMES},
                self.h: P(None, self.axis)}

    # region: rnn.brainstate.loss
    def loss(self, xs, ys, recurrence: StateSplit):
        """One device's loss: reset ``h``, run the steps, reduce the outputs once."""
        w = {k: s.value for k, s in self.weights.items()}
        self.h.value = recurrence.start(jnp.zeros_like(self.h.value))

        def step(x):
            self.h.value, y = cell(w, self.h.value, x, recurrence)
            return y

        y = brainstate.transform.for_loop(step, jnp.swapaxes(xs, 0, 1))
        y = recurrence.outputs(y)
        return jnp.mean((jnp.swapaxes(y, 0, 1) - ys) ** 2)

    def split_loss(self, *, gather: bool = True, recurrence=None):
        """``loss(xs, ys)`` under ``brainstate.transform.shard_map``: the states split
        as :meth:`state_specs`, the data replicated."""
        recurrence = StateSplit(self.axis, gather=gather) if recurrence is None \
            else recurrence
        specs = self.state_specs()
        return brainstate.transform.shard_map(
            lambda xs, ys: self.loss(xs, ys, recurrence), self.mesh,
            in_specs=(P(), P()), out_specs=P(),
            state_in_specs=specs, state_out_specs=specs)
    # endregion


def stateful_grad_fn(model: StateRNN, *, gather: bool = True, recurrence=None):
    """``grads(xs, ys) -> ({'win', 'wrec', 'wout'}, loss)``, jitted by brainstate.

    The gradients come back split like the weight states.
    """
    grads = brainstate.transform.grad(model.split_loss(gather=gather,
                                                       recurrence=recurrence),
                                      grad_states=model.weights, return_value=True)
    return brainstate.transform.jit(grads)
