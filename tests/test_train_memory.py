"""The memory model of shardbook.train_memory against compiled.memory_analysis().

Runs in this pytest process (4 simulated CPU devices, tests/conftest.py).  Each case
compiles one training step, never runs it, and checks the exact rows (arguments,
outputs, aliased bytes) and the bound on temporaries.
"""
import numpy as np
import pytest

import jax
import brainpy.math as bm

from shardbook import train_memory as tm
from shardbook.memory import compiled_memory
from shardbook.models import RNN, make_task, make_train_step, shard_batch

I, H, O, B, T = 8, 840, 8, 8, 20


def _model(k, axis):
    devices = np.array(jax.devices()[:k])
    with bm.sharding.device_mesh(devices, [axis]) as mesh:
        model = RNN(I, H, O, B)
    xs, ys = make_task(B, T, I, O, seed=0)
    return model, mesh, shard_batch(xs, mesh), shard_batch(ys, mesh)


def _shards(k, axis):
    return dict(hidden_shards=k if axis == "hidden" else 1,
                batch_shards=k if axis == "batch" else 1)


@pytest.mark.parametrize("k,axis", [(1, "hidden"), (4, "hidden"),
                                    (4, "batch")])
def test_bm_jit_step_holds_six_copies(k, axis):
    model, _, x, y = _model(k, axis)
    compiled = make_train_step(model).lower(x, y).compile()
    p = tm.predict(I, H, O, B, T, **_shards(k, axis))
    m = tm.check(p, compiled)
    assert m["aliased"] == 0
    # the exact rows hold 6P: old and new weights and moments
    assert abs(m["arguments"] + m["outputs"] - 6 * p.weights) < 0.02 * 6 * p.weights


@pytest.mark.parametrize("k,axis", [(4, "hidden"), (4, "batch")])
@pytest.mark.parametrize("donate", [False, True])
def test_functional_step_with_and_without_donation(k, axis, donate):
    model, _, x, y = _model(k, axis)
    params = tm.params_of(model)
    opt = tm.adam_init(params)
    step = tm.functional_step(donate=donate)
    compiled = step.lower(params, opt, x, y).compile()
    p = tm.predict(I, H, O, B, T, donate=donate, bm_jit=False, **_shards(k, axis))
    m = tm.check(p, compiled)
    assert (m["aliased"] > 0) == donate
    # donation never reaches the 4P minimum on XLA:CPU: gradient-sized buffers
    # become temporaries; with the hidden axis split it still saves about one P
    if donate:
        assert p.minimum <= m["total"]
        if axis == "hidden":
            assert m["total"] < 6 * p.weights


def test_donation_saves_memory_against_no_donation():
    model, _, x, y = _model(4, "hidden")
    params = tm.params_of(model)
    opt = tm.adam_init(params)
    kept = compiled_memory(tm.functional_step(donate=False).lower(params, opt, x, y).compile())
    given = compiled_memory(tm.functional_step(donate=True).lower(params, opt, x, y).compile())
    P = tm.predict(I, H, O, B, T, hidden_shards=4).weights
    assert kept["total"] - given["total"] > 0.5 * P


def test_functional_step_equals_bm_jit_step():
    """The pure step computes what make_train_step computes (same weights after 2 steps)."""
    model, _, x, y = _model(4, "hidden")
    params = tm.params_of(model)
    opt = tm.adam_init(params)
    step = tm.functional_step(donate=False)
    losses = []
    for _ in range(2):
        params, opt, loss = step(params, opt, x, y)
        losses.append(float(loss))
    bstep = make_train_step(model)
    blosses = [float(bstep(x, y)) for _ in range(2)]
    np.testing.assert_allclose(losses, blosses, rtol=1e-5)
    for k in ("win", "wrec", "wout"):
        np.testing.assert_allclose(np.asarray(params[k]), np.asarray(getattr(model, k).value),
                                   rtol=1e-4, atol=1e-6)


def test_check_fails_on_a_wrong_model():
    model, _, x, y = _model(4, "hidden")
    compiled = make_train_step(model).lower(x, y).compile()
    wrong = tm.predict(I, H, O, B, T, hidden_shards=2)   # the wrong device count
    with pytest.raises(AssertionError, match="arguments"):
        tm.check(wrong, compiled)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="does not divide"):
        tm.predict(I, 841, O, B, T, hidden_shards=4)
    with pytest.raises(ValueError, match="donate"):
        tm.predict(I, H, O, B, T, donate=True)


def test_four_p_minimum_and_six_p_without_donation():
    p = tm.predict(I, H, O, B, T, hidden_shards=2)
    assert p.minimum == 4 * p.weights
    assert p.arguments + p.outputs >= 6 * p.weights


def test_temporaries_bound_can_be_left_out_for_other_compilers():
    """The temporaries bound describes XLA:CPU; check(temporaries=False) keeps the exact rows."""
    model, _, x, y = _model(4, "hidden")
    compiled = make_train_step(model).lower(x, y).compile()
    p = tm.predict(I, H, O, B, T, hidden_shards=4)
    tight = tm.TrainBytes(**{**p.__dict__, "temporaries": 0.0})
    with pytest.raises(AssertionError, match="temporaries"):
        tm.check(tight, compiled)
    tm.check(tight, compiled, temporaries=False)
