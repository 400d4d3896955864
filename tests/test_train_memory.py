"""The memory model of shardbook.train_memory against compiled.memory_analysis().

Runs in this pytest process (4 simulated CPU devices, tests/conftest.py).  Each case
compiles one training step, never runs it, and checks the exact rows (arguments,
outputs, aliased bytes) and the bound on temporaries (the XLA:CPU entry
"train.temporaries" of shardbook/expectations.toml).  The step variants (remat,
micro-batches, bf16) are in tests/test_rnn_variants.py.
"""

import dataclasses
import functools

import numpy as np
import pytest

import brainpy.math as bm

from shardbook import book, expect, rnn, train_memory as tm
from shardbook.memory import compiled_memory

RNN, make_task, make_train_step, shard_batch = (
    rnn.RNN,
    rnn.make_task,
    rnn.make_train_step,
    rnn.shard_batch,
)
CH3 = book.config("ch3")
I, H, O, B, T = CH3.I, CH3.H, CH3.O, CH3.B, CH3.T  # noqa: E741  (the prose's names)


def _model(k, axis):
    devices = np.array(book.devices()[:k])
    with bm.sharding.device_mesh(devices, [axis]) as mesh:
        model = RNN(I, H, O, B)
    xs, ys = make_task(B, T, I, O, seed=0)
    return model, mesh, shard_batch(xs, mesh), shard_batch(ys, mesh)


_built = functools.cache(_model)  # for compiling only: lower() changes no variable


@functools.cache
def _bm_step(k, axis):
    """make_train_step's program at chapter 3's sizes, compiled once per session
    (several tests read the same program; each compile costs seconds)."""
    model, _, x, y = _built(k, axis)
    return make_train_step(model).lower(x, y).compile()


@functools.cache
def _functional(k, axis, donate):
    """The pure step's program, compiled once per session."""
    model, _, x, y = _built(k, axis)
    params = rnn.params_of(model)
    step = rnn.functional_step(donate=donate)
    return step.lower(params, rnn.adam_init(params), x, y).compile()


def _shards(k, axis):
    return {
        "hidden_shards": k if axis == "hidden" else 1,
        "batch_shards": k if axis == "batch" else 1,
    }


@pytest.mark.parametrize("k,axis", [(1, "hidden"), (4, "hidden"), (4, "batch")])
def test_bm_jit_step_holds_six_copies(k, axis):
    compiled = _bm_step(k, axis)
    p = tm.predict(I, H, O, B, T, **_shards(k, axis))
    m = tm.check(p, compiled)
    assert m["aliased"] == 0
    # the exact rows hold 6P: old and new weights and moments
    assert abs(m["arguments"] + m["outputs"] - 6 * p.weights) < 0.02 * 6 * p.weights


@pytest.mark.parametrize("k,axis", [(4, "hidden"), (4, "batch")])
@pytest.mark.parametrize("donate", [False, True])
def test_functional_step_with_and_without_donation(k, axis, donate):
    compiled = _functional(k, axis, donate)
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
    kept = compiled_memory(_functional(4, "hidden", False))
    given = compiled_memory(_functional(4, "hidden", True))
    P = tm.predict(I, H, O, B, T, hidden_shards=4).weights
    assert kept["total"] - given["total"] > 0.5 * P


def test_functional_step_equals_bm_jit_step():
    """The pure step computes what make_train_step computes (same weights after two
    steps)."""
    model, _, x, y = _model(4, "hidden")
    params = rnn.params_of(model)
    opt = rnn.adam_init(params)
    step = _functional(4, "hidden", False)  # the compiled pure step, called
    losses = []
    for _ in range(2):
        params, opt, loss = step(params, opt, x, y)
        losses.append(float(loss))
    bstep = make_train_step(model)
    blosses = [float(bstep(x, y)) for _ in range(2)]
    np.testing.assert_allclose(losses, blosses, rtol=1e-5)
    for k in ("win", "wrec", "wout"):
        np.testing.assert_allclose(
            np.asarray(params[k]),
            np.asarray(getattr(model, k).value),
            rtol=1e-4,
            atol=1e-6,
        )


def test_check_fails_on_a_wrong_model():
    compiled = _bm_step(4, "hidden")
    wrong = tm.predict(I, H, O, B, T, hidden_shards=2)  # the wrong device count
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
    """The temporaries bound describes XLA:CPU; check(temporaries=False) keeps the
    exact rows."""
    compiled = _bm_step(4, "hidden")
    p = tm.predict(I, H, O, B, T, hidden_shards=4)
    tight = tm.TrainBytes(**{**p.__dict__, "temporaries": 0.0})
    with pytest.raises(AssertionError, match="temporaries"):
        tm.check(tight, compiled)
    tm.check(tight, compiled, temporaries=False)


@pytest.mark.parametrize("k,axis", [(4, "hidden"), (4, "batch")])
def test_the_floor_fails_a_model_that_predicts_too_much(k, axis):
    """check(floor=True) bounds the temporaries from below too: at least one state
    array per step.  Planted: activations not divided by the split, a model whose
    upper bound the measured temporaries still pass."""
    compiled = _bm_step(k, axis)
    p = tm.predict(I, H, O, B, T, **_shards(k, axis))
    tm.check(p, compiled, floor=True)
    high = dataclasses.replace(p, activations=k * p.activations,
                               temporaries=k * p.temporaries)
    tm.check(high, compiled)  # from above only: the planted model passes
    with pytest.raises(AssertionError, match="below"):
        tm.check(high, compiled, floor=True)


def test_a_changed_table_entry_changes_the_check(tmp_path, monkeypatch):
    """The bound is read from the expectations table for the program's compiler:
    without the donated step's gradient buffers (donated_grads = 0) it fails."""
    compiled = _functional(4, "hidden", True)

    def predicted():
        return tm.predict(I, H, O, B, T, hidden_shards=4, donate=True, bm_jit=False)

    tm.check(predicted(), compiled)
    text = expect.TABLE.read_text()
    assert "donated_grads = 2 " in text
    (tmp_path / "t.toml").write_text(
        text.replace("donated_grads = 2 ", "donated_grads = 0 ")
    )
    monkeypatch.setenv("BOOK_EXPECTATIONS", str(tmp_path / "t.toml"))
    with pytest.raises(AssertionError, match="temporaries"):
        tm.check(predicted(), compiled)
    # a prediction made for another compiler is re-bounded for the program's own
    other = dataclasses.replace(predicted(), compiler="gpu", temporaries=1e12)
    with pytest.raises(AssertionError, match="temporaries"):
        tm.check(other, compiled)


def test_the_gathered_state_does_not_shrink_with_the_hidden_split():
    """The hidden split gathers the state whole, (B_d, H), every step, and its
    cotangent in the backward loop: a term that does not shrink with the split
    (chapter 3's memory sizes on 32 devices, B = 32, missed the bound without it).
    Planted: with a short sequence and a wide hidden layer the same term matters on 4
    devices, and a bound without it fails."""
    # the gathered state 0.5 MiB, a third of the activations; measured: 2,392,488 B
    # of temporaries, the bound 2,949,120, the bound without the term 1,795,686
    i, h, o, b, t = 8, 1024, 8, 128, 4
    devices = np.array(book.devices()[:4])
    with bm.sharding.device_mesh(devices, ["hidden"]) as mesh:
        model = RNN(i, h, o, b)
    xs, ys = make_task(b, t, i, o, seed=0)
    compiled = (
        make_train_step(model)
        .lower(shard_batch(xs, mesh), shard_batch(ys, mesh))
        .compile()
    )
    p = tm.predict(i, h, o, b, t, hidden_shards=4)
    assert p.gathered_state == 4 * b * h
    assert tm.predict(i, h, o, b, t, batch_shards=4).gathered_state == 0
    m = tm.check(p, compiled)
    bare = dataclasses.replace(p, gathered_state=0.0)
    assert m["temporaries"] > tm.temporaries_bound(bare, "cpu"), (m, p)
    with pytest.raises(AssertionError, match="temporaries"):
        tm.check(dataclasses.replace(bare, temporaries=None), compiled)
