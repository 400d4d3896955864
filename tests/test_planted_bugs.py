"""The equivalence checks of chapters 2 and 3 fail on planted bugs.

Chapter 2 (batch split) and chapter 3 (hidden split) compare the gradients of the
sharded model with those of the one-device model, as checks ``ch2.rnn.grads`` and
``ch3.hidden.grads``, with the tolerances recorded in book/data/tolerance_margins.json
(which tests/test_margins.py ties to the notebooks' stored verdicts).  Here the same
comparison, at the same tolerance, must

* pass for the real sharded gradient;
* fail when one device's share of the gradient is lost (a dropped shard);
* fail when the gradient is scaled by 7/8 (a missing or doubled ``psum``, seen
  through a mean over the wrong count).

And it shows why the chapters compare gradients and not only weights: after one Adam
step, the weights of the 7/8 bug pass the same check, because Adam's first update is
about ``lr * sign(g)``.
"""

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainpy as bp
import brainpy.math as bm

from shardbook import book, verify
from shardbook.rnn import RNN, make_grad_fn, make_task

ROOT = Path(__file__).resolve().parents[1]
B, T, I, H, O = 16, 12, 3, 32, 2  # noqa: E741  (small sizes: the check, not the model)
NAMES = ("win", "wrec", "wout")


def tolerance(check: str) -> dict:
    data = json.loads((ROOT / "book" / "data" / "tolerance_margins.json").read_text())
    assert check in data["checks"], f"{check} was never measured: run ./lab/margins"
    c = data["checks"][check]
    return dict(rtol=c["rtol"], atol=c["atol"])


@pytest.fixture(scope="module")
def data():
    return make_task(B, T, I, O, seed=3)


@pytest.fixture(scope="module")
def reference(data):
    xs, ys = data
    ref = RNN(I, H, O, B, annotate="none", seed=5)
    grads, _ = make_grad_fn(ref)(xs, ys)
    return ref, {k: np.asarray(v) for k, v in grads.items()}


def sharded_grads(axis: str, data):
    xs, ys = data
    with bm.sharding.device_mesh(book.devices(), [axis]) as mesh:
        model = RNN(I, H, O, B, seed=5)
    spec = P("batch") if axis == "batch" else P()
    xs, ys = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (xs, ys))
    grads, _ = make_grad_fn(model)(xs, ys)
    return {k: np.asarray(v) for k, v in grads.items()}


def test_ch2_batch_split_gradient_check_catches_planted_bugs(data, reference):
    tol = tolerance("ch2.rnn.grads")
    ref, g1 = reference
    n = len(book.devices())
    assert n > 1, "a planted shard bug needs more than one device"
    gn = sharded_grads("batch", data)
    verify.close("ch2.rnn.grads", gn, g1, **tol)  # the real thing passes

    # A dropped shard: the last device's samples never reach the sum (still / B).
    xs, ys = data
    keep = B - B // n
    g_part, _ = make_grad_fn(ref)(xs[:keep], ys[:keep])  # mean over `keep` samples
    dropped = {k: np.asarray(v) * keep / B for k, v in g_part.items()}
    with pytest.raises(AssertionError, match="NOT equal"):
        verify.close("ch2.rnn.grads", dropped, g1, **tol)

    scaled = {k: v * 7 / 8 for k, v in gn.items()}  # a wrong normalisation
    with pytest.raises(AssertionError, match="NOT equal"):
        verify.close("ch2.rnn.grads", scaled, g1, **tol)


def test_ch3_hidden_split_gradient_check_catches_planted_bugs(data, reference):
    tol = tolerance("ch3.hidden.grads")
    _, g1 = reference
    n = len(book.devices())
    gn = sharded_grads("hidden", data)
    verify.close("ch3.hidden.grads", gn, g1, **tol)

    # A dropped shard: the last device's block of hidden units has no gradient.
    dropped = {k: v.copy() for k, v in gn.items()}
    block = slice(H - H // n, H)
    dropped["win"][:, block] = 0
    dropped["wrec"][:, block] = 0
    dropped["wout"][block, :] = 0
    with pytest.raises(AssertionError, match="NOT equal"):
        verify.close("ch3.hidden.grads", dropped, g1, **tol)

    scaled = {k: v * 7 / 8 for k, v in gn.items()}
    with pytest.raises(AssertionError, match="NOT equal"):
        verify.close("ch3.hidden.grads", scaled, g1, **tol)


def test_adam_hides_a_scaled_gradient_from_a_weight_check(reference):
    """Why the chapters compare gradients: one Adam step with g and with 7/8 g.

    BrainPy's Adam scales the step by sqrt(1 - b2^t) / (1 - b1^t), so its first update
    is lr * g / (|g| + eps'), eps' = 1e-8 / sqrt(1 - 0.999) = 3.2e-7: about
    lr * sign(g),
    whatever the scale of g.  A gradient 12.5 % too small moves the weights almost
    exactly as the right one does.
    """
    _, g1 = reference
    m = RNN(I, H, O, B, annotate="none", seed=5)  # one model: each build compiles
    w0 = {k: np.asarray(getattr(m, k).value) for k in NAMES}
    updates = []
    for factor in (1.0, 7 / 8):
        for k in NAMES:  # back to the initial weights; a fresh Adam below
            getattr(m, k).value = bm.asarray(w0[k])
        train_vars = m.train_vars().unique()
        opt = bp.optim.Adam(lr=1e-2, train_vars=train_vars)
        by_name = {k: k.rsplit(".", 1)[-1] for k in train_vars}
        opt.update({k: bm.asarray(g1[by_name[k]] * factor) for k in train_vars})
        updates.append({k: np.asarray(getattr(m, k).value) - w0[k] for k in NAMES})
    for k in NAMES:
        big = np.abs(g1[k]) > 1e-5  # gradients well above eps'
        assert big.mean() > 0.5
        step = np.abs(updates[0][k][big])
        assert np.all(np.abs(step - 1e-2) < 1e-3), "first step is about lr * sign(g)"
        rel = np.abs(updates[1][k] - updates[0][k])[big] / step
        assert rel.max() < 0.125 / 10, (
            "the 12.5 % gradient error shrinks > 10x in the weights"
        )
    tol = tolerance("ch2.rnn.grads")
    with pytest.raises(AssertionError):  # while the gradient check sees it
        verify.close("ch2.rnn.grads", {k: g1[k] * 7 / 8 for k in NAMES}, g1, **tol)
