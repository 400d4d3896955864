"""Tests of the BrainPy RNN (``shardbook.rnn``, ``shardbook/rnn/model.py``) on 4
simulated CPU devices (conftest.py sets them before JAX starts).

The measurements are one script, run once in this process; it prints them as JSON and
the tests below assert on them (the round trip through JSON is what they compare).
"""

import contextlib
import io
import textwrap

import numpy as np
import pyrun  # tests/pyrun.py
import pytest

from shardbook import rnn

SCRIPT = textwrap.dedent(
    r"""
    import json, warnings
    from shardbook import book
    book.setup_devices(verbose=False)
    import jax, numpy as np
    import brainpy as bp, brainpy.math as bm
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from shardbook import rnn
    RNN, make_task, make_train_step = rnn.RNN, rnn.make_task, rnn.make_train_step
    train, shard_batch, mesh_shape_2d = rnn.train, rnn.shard_batch, book.mesh_shape_2d
    from shardbook.shards import max_bytes_per_device

    n = jax.device_count()
    B, T, I, H, O = 8, 12, 3, 840, 2
    xs, ys = make_task(B, T, I, O, seed=0)
    out = dict(n=n)

    def spec(v):
        s = v.value.sharding
        return str(getattr(s, "spec", type(s).__name__))

    def build(shape, names, **kw):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            if shape is None:
                return RNN(I, H, O, B, **kw), None, [str(x.message) for x in w]
            grid = np.array(jax.devices()).reshape(shape)
            with bm.sharding.device_mesh(grid, names) as mesh:
                model = RNN(I, H, O, B, **kw)
        return model, mesh, [str(x.message) for x in w]

    runs = {}
    for key, shape, names in [("single", None, None), ("hidden", (n,), ["hidden"]),
                              ("batch", (n,), ["batch"]),
                              ("2d", mesh_shape_2d(n), ["batch", "hidden"])]:
        model, mesh, warned = build(shape, names)
        x, y = ((xs, ys) if mesh is None
                else (shard_batch(xs, mesh), shard_batch(ys, mesh)))
        built = {k: spec(getattr(model, k)) for k in ("state", "win", "wrec", "wout")}
        step = make_train_step(model, 1e-3)
        losses = train(model, x, y, 3, step=step)
        runs[key] = dict(
            losses=losses.tolist(),
            wrec=np.asarray(model.wrec.value).tolist(),
            built=built,
            specs={k: spec(getattr(model, k))
                   for k in ("state", "win", "wrec", "wout")},
            adam={k.split(".")[-1]: spec(v) for k, v in step.optimizer.vars().items()
                  if k.endswith(("_m", "_v"))},
            warnings=warned,
            weight_bytes=max_bytes_per_device(model.win, model.wrec, model.wout),
        )
        if key == "hidden":
            model.reset_state(B)
            runs[key]["state_after_reset"] = spec(model.state)
            # use_mesh: reset_state puts the state on another mesh of the same names
            other = Mesh(np.array(jax.devices()[::-1]), ("hidden",))
            model.use_mesh(other)
            model.reset_state(B)
            runs[key]["reset_on_other_mesh"] = [
                model.state_sharding.mesh == other,
                [d.id for d in model.state.value.sharding.mesh.devices.flat]]
            errors = []
            for bad in (lambda: model.use_mesh(Mesh(np.array(jax.devices()), ("x",))),
                        lambda: setattr(model, "state_sharding", P("hidden"))):
                try:
                    bad()
                    errors.append("no error")
                except (ValueError, TypeError) as e:
                    errors.append(type(e).__name__)
            runs[key]["use_mesh_errors"] = errors
    out["runs"] = runs
    out["predicted_weight_bytes"] = rnn.weight_bytes(I, H, O, hidden_shards=n)
    single = RNN(I, H, O, B, annotate="none")
    single.use_mesh(Mesh(np.array(jax.devices()), ("hidden",)))   # nothing to move
    out["single_state_sharding"] = repr(single.state_sharding)

    # annotate="state": the weights start unsharded
    model, _, _ = build((n,), ["hidden"], annotate="state")
    out["state_only_before"] = {k: spec(getattr(model, k)) for k in ("state", "wrec")}

    # the discussion's positional call: variable(init, num_hid, batch_size) is
    # batch num_hid
    with bm.sharding.device_mesh(jax.devices(), ["hidden"]):
        v = bp.init.variable(bm.zeros, H, B, axis_names=["hidden"])
        out["trap_shape"] = list(v.shape)
        try:
            bp.init.variable(bm.zeros, H, 1, axis_names=["hidden"])
            out["trap_batch1"] = "no error"
        except Exception as e:
            out["trap_batch1"] = type(e).__name__
        out["fixed_shape"] = list(bp.init.variable(bm.zeros, batch_or_mode=1, sizes=H,
                                                   axis_names=["hidden"]).shape)

    out["task_same"] = bool(np.array_equal(make_task(2, 5, 3, 2, 7)[1],
                                           make_task(2, 5, 3, 2, 7)[1]))
    print("RESULT" + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def result():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(SCRIPT, {"__name__": "test_models_script"})
    return pyrun.marked_json(out.getvalue(), "RESULT")


def test_four_devices(result):
    assert result["n"] == 4


def test_every_strategy_gives_the_same_training(result):
    ref = result["runs"]["single"]
    for key in ("hidden", "batch", "2d"):
        run = result["runs"][key]
        # float32, 3 Adam steps: only the order of sums differs between strategies
        np.testing.assert_allclose(run["losses"], ref["losses"], rtol=1e-5, err_msg=key)
        np.testing.assert_allclose(run["wrec"], ref["wrec"], atol=1e-5, err_msg=key)
    assert ref["losses"][-1] < ref["losses"][0], "training does not reduce the loss"


def test_hidden_shardings(result):
    # as built (before any jit step could re-shard them by propagation)
    assert result["runs"]["hidden"]["built"] == {
        "state": "P(None, 'hidden')",
        "win": "P(None, 'hidden')",
        "wrec": "P(None, 'hidden')",
        "wout": "P('hidden', None)",
    }
    # after three training steps
    specs = result["runs"]["hidden"]["specs"]
    assert specs == {
        "state": "P(None, 'hidden')",
        "win": "P(None, 'hidden')",
        "wrec": "P(None, 'hidden')",
        "wout": "P('hidden',)",
    }
    assert result["runs"]["hidden"]["state_after_reset"] == "P(None, 'hidden')"
    # Adam moments stay split like their weights after updates
    adam = result["runs"]["hidden"]["adam"]
    assert adam["wrec_m"] == adam["wrec_v"] == "P(None, 'hidden')"
    assert adam["wout_m"] == "P('hidden',)"
    # the weights on one device are a quarter of the whole
    assert result["runs"]["hidden"]["weight_bytes"] == result["predicted_weight_bytes"]


def test_batch_and_2d_shardings(result):
    b = result["runs"]["batch"]
    assert b["specs"]["state"] == "P('batch',)"
    assert b["specs"]["wrec"] == "P()"  # replicated
    assert b["warnings"] == [], (
        "the RNN should silence BrainPy's all-names-missing warning on a batch mesh"
    )
    d = result["runs"]["2d"]["specs"]
    assert d["state"] == "P('batch', 'hidden')" and d["wrec"] == "P(None, 'hidden')"


def test_unsharded_outside_a_mesh(result):
    assert set(result["runs"]["single"]["specs"].values()) == {"SingleDeviceSharding"}


def test_state_only_annotation(result):
    assert result["state_only_before"] == {
        "state": "P(None, 'hidden')",
        "wrec": "SingleDeviceSharding",
    }


def test_argument_order_trap(result):
    assert result["trap_shape"] == [840, 8]  # batch 840, size 8: mis-shaped, no error
    # the discussion's batch_size=1 on 4 devices
    assert result["trap_batch1"] == "IndivisibleError"
    assert result["fixed_shape"] == [1, 840]


def test_use_mesh_moves_the_reset_state(result):
    run = result["runs"]["hidden"]
    same_mesh, ids = run["reset_on_other_mesh"]
    assert same_mesh and ids == [3, 2, 1, 0]
    assert run["use_mesh_errors"] == ["ValueError", "TypeError"]
    assert result["single_state_sharding"] == "None"


def test_task_is_deterministic(result):
    assert result["task_same"]


def test_the_bytes_formula():

    assert rnn.weight_count(3, 840, 2) == 845 * 840
    assert rnn.weight_bytes(3, 840, 2, hidden_shards=4) == 4 * 845 * 840 // 4
    assert rnn.grad_bytes(4, 32, 2) == 4 * 38 * 32 + 4
    assert rnn.grad_bytes(4, 32, 2, loss=False) == 4 * 38 * 32
    with pytest.raises(ValueError, match="does not divide the hidden size 841"):
        rnn.weight_bytes(3, 841, 2, hidden_shards=4)
