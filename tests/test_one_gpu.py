"""Page 2c's code in the package: its configuration and its GPU-target builder.

``shardbook.gputarget_steps.rnn_one_gpu`` builds the RNN's gradient on one device with
one fix of "is one GPU enough?" (remat, micro-batches, bf16); page 2c compiles it for
an H200.  Here it is compiled on this process's CPU (``gputarget.compile_here``): each
option must reach the compiled program, checked by the saving the page predicts.  A
builder that drops an option (the planted bug: ``remat`` ignored) fails.
"""

import jax
import pytest

from shardbook import book

rnn, tm = book.rnn, book.train_memory
BUILDER = "shardbook.gputarget_steps:rnn_one_gpu"


def _temps(**options):
    program = book.gputarget.compile_here(BUILDER, devices=1, **options)
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
