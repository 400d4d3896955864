"""Page 2c's code in the package: its configuration and its GPU-target builder.

``shardbook.gputarget_steps.rnn_one_gpu`` builds the RNN's gradient on one device with
one fix of "is one GPU enough?" (remat, micro-batches, bf16); page 2c compiles it for
an H200.  Here it is compiled on this process's CPU (``gputarget.compile_here``): each
option must reach the compiled program, checked by the saving the page predicts.  A
builder that drops an option (the planted bug: ``remat`` ignored) fails.  The page's
own BrainPy cell, read from the page, is checked at other sizes the same way.
"""

import functools
from dataclasses import replace

import jax
import notebooks as nbs  # ci/notebooks.py (on the path: tests/conftest.py)
import numpy as np
import pytest

import brainpy as bp
import brainpy.math as bm
import brainstate

from shardbook import book, gputarget, memory, rnn, train_memory as tm

BUILDER = "shardbook.gputarget_steps:rnn_one_gpu"


def _temps(**options):
    program = gputarget.compile_here(BUILDER, devices=1, **options)
    return program.memory["temporaries"]


def _sizes():
    c = book.config("ch2c", 1)
    return c.I, c.H, c.O, c.B, c.T


def check_savings(temps: dict) -> None:
    """The page's claims on XLA:CPU: remat saves 2 T B H x 4 bytes (within 1 %),
    8 micro-batches keep less than a third of the plain step's temporaries, and
    bf16 saves nothing (XLA:CPU upcasts)."""
    _, H, _, B, T = _sizes()
    predicted = 2 * T * B * H * 4
    saving = temps["plain"] - temps["remat"]
    assert abs(saving - predicted) <= 0.01 * predicted, (saving, predicted)
    assert 3 * temps["micro 8"] < temps["plain"]
    assert temps["bf16"] >= temps["plain"]


@pytest.fixture(scope="module")
def temps():
    return {
        "plain": _temps(),
        "remat": _temps(remat=True),
        "micro 8": _temps(micro_batches=8),
        "bf16": _temps(dtype="bfloat16"),
    }


def test_every_option_reaches_the_compiled_program(temps):
    check_savings(temps)


def test_an_ignored_remat_flag_fails(temps, monkeypatch):
    real = rnn.pure.grad_fn

    def forgetful(remat=False, **options):  # the planted bug: remat dropped
        return real(**options)

    monkeypatch.setattr(rnn.pure, "grad_fn", forgetful)
    bad = dict(temps, remat=_temps(remat=True))
    with pytest.raises(AssertionError):
        check_savings(bad)


def test_the_configuration_is_the_pages():
    c = book.config("ch2c", 8)
    assert (c.I, c.H, c.O, c.B, c.T) == (4, 128, 4, 16, 50)
    assert all(c.B % k == 0 for k in c.micro)  # every micro-batch count divides B
    big = tm.predict(c.I_big, c.H_big, c.O_big, c.B_big, c.T_big, bm_jit=False,
                     compiler=None)
    assert big.activations == 250 * big.weights  # the page's "250 times"
    assert book.config("ch2c", 11).H == 128  # the fixes run on one device
    assert book.config("ch2c", 11).H_split == 132
    assert jax.numpy.dtype("bfloat16").itemsize == 2


VARIANTS = ({}, {"remat": True}, {"dtype": "bfloat16"},
            {"remat": True, "dtype": "bfloat16", "micro_batches": 4})


@functools.cache
def _task(n_in, hid, n_out):
    """Weights and data at these sizes, made once (each RNN build compiles its
    initialisers; both residual tests read the same arrays)."""
    c = book.config("ch2c", 1)
    params = rnn.params_of(rnn.RNN(n_in, hid, n_out, c.B, annotate="none"))
    return params, *rnn.make_task(c.B, c.T, n_in, n_out, seed=0)


def check_residuals(predict) -> None:
    """Every per-step residual autodiff keeps (read from jax.vjp, nothing compiled)
    is what ``predict`` counts: activations plus the data-sized (T, B, I) and
    (B, T, O) arrays, for each fix and at I + O comparable to H."""
    c = book.config("ch2c", 1)
    for n_in, hid, n_out in ((c.I, c.H, c.O), (96, 32, 64)):   # I + O > H too
        params, xs, ys = _task(n_in, hid, n_out)
        for options in VARIANTS:
            k = options.get("micro_batches", 1)
            loss_opts = {key: jax.numpy.dtype(v) if key == "dtype" else v
                         for key, v in options.items() if key != "micro_batches"}
            got = tm.saved_residuals(lambda p, x, y: rnn.loss(p, x, y, **loss_opts),
                                     params, xs[: c.B // k], ys[: c.B // k])
            p = predict(n_in, hid, n_out, c.B, c.T, bm_jit=False, compiler=None,
                        remat=options.get("remat", False), micro_batches=k,
                        compute_dtype=options.get("dtype"))
            assert got == p.activations + p.kept_data, (n_in, hid, options, got)


def test_predict_counts_every_residual():
    check_residuals(tm.predict)


def test_a_predict_that_forgets_the_inputs_fails():
    def forgetful(n_in, hid, n_out, B, T, **kw):   # the planted bug: no (T, B, I)
        p = tm.predict(n_in, hid, n_out, B, T, **kw)
        k = kw.get("micro_batches", 1)
        return replace(p, kept_data=p.kept_data - T * (B // k) * n_in * p.act_itemsize)

    with pytest.raises(AssertionError):
        check_residuals(forgetful)


# ------------------------------------------------ page 2c's BrainPy remat, other sizes
def _page_cell_definitions() -> dict:
    """Page 2c's ``Cell`` and ``compile_cell_grads``, read from the page itself (the
    model is written once, there), defined here without the page's measurement."""
    page = nbs.load(nbs.ROOT / "book" / "02c-one-gpu-enough.ipynb")
    code = next((nbs.source(c) for c in nbs.code_cells(page)
                 if nbs.source(c).startswith("class Cell(")), None)
    assert code is not None, "page 2c has no cell that starts with `class Cell(`"
    definitions, found, _ = code.partition("\nwith jax.default_device")
    assert found, "page 2c's Cell cell no longer measures under jax.default_device"
    namespace = dict(bp=bp, bm=bm, jax=jax, np=np)
    exec(definitions, namespace)
    return namespace


def _brainpy_remat_saving(remat, num_hid: int, batch: int, steps: int) -> int:
    page = _page_cell_definitions()
    bm.random.seed(0)
    cell = page["Cell"](3, num_hid, batch)
    inputs = bm.asarray(np.ones((steps, batch, 3), np.float32))
    temps = {}
    for name, update in (("plain", cell.update), ("remat", remat(cell.update))):
        _, compiled = page["compile_cell_grads"](
            cell, lambda u, update=update: bm.for_loop(update, u), inputs)
        temps[name] = memory.compiled_memory(compiled)["temporaries"]
    return temps["plain"] - temps["remat"]


@pytest.mark.parametrize("num_hid,batch,steps", [(64, 8, 30), (96, 4, 20)])
def test_brainpy_remat_saves_the_predicted_bytes_and_a_no_op_fails(num_hid, batch,
                                                                   steps):
    """Page 2c's BrainPy remat at two other sizes: ``brainstate.transform.remat`` on
    the page's stateful ``update`` saves 2 T B H x 4 bytes within 1 %; the planted
    bugs, a remat that wraps nothing and one whose policy saves everything, fail the
    same check."""
    predicted = 2 * steps * batch * num_hid * 4

    def within(saving):
        return abs(saving - predicted) <= 0.01 * predicted

    assert within(_brainpy_remat_saving(brainstate.transform.remat, num_hid, batch,
                                        steps))
    assert not within(_brainpy_remat_saving(lambda f: f, num_hid, batch, steps))
    keep_all = functools.partial(brainstate.transform.remat,
                                 policy=jax.checkpoint_policies.everything_saveable)
    assert not within(_brainpy_remat_saving(keep_all, num_hid, batch, steps))


def test_a_wrapped_bm_scan_body_saves_the_same_bytes():
    """Page 2c's advice for ``bm.scan`` at another size: its body wrapped in
    ``brainstate.transform.remat`` saves 2 T B H x 4 bytes against the plain scan,
    within 1 %, with bit-identical gradients.  (The page's cell is read from the
    notebook, which ``tests/test_pairs.py`` keeps equal to its text.)"""
    page = _page_cell_definitions()
    steps, batch, num_hid = 30, 8, 64
    bm.random.seed(0)
    cell = page["Cell"](3, num_hid, batch)
    inputs = bm.asarray(np.ones((steps, batch, 3), np.float32))

    def body(carry, x):
        return carry, cell.update(x)

    temps, grads = {}, {}
    for name, fn in (("scan", body), ("wrapped", brainstate.transform.remat(body))):
        run, compiled = page["compile_cell_grads"](
            cell, lambda u, fn=fn: bm.scan(fn, 0.0, u)[1], inputs)
        temps[name] = memory.compiled_memory(compiled)["temporaries"]
        grads[name] = jax.tree.leaves(run())
    predicted = 2 * steps * batch * num_hid * 4
    assert abs(temps["scan"] - temps["wrapped"] - predicted) <= 0.01 * predicted, temps
    assert all(np.array_equal(a, b) for a, b in zip(grads["scan"], grads["wrapped"]))
