"""shardbook.verify: each check must fail when its claim breaks, and print a verdict
that does not depend on the observed difference."""

import json

import numpy as np
import pytest

from shardbook import verify


def test_close_passes_within_and_fails_outside_the_tolerance():
    d = np.linspace(-1, 1, 101, dtype=np.float32)
    gap = verify.close("t.ok", d * (1 + 1e-6), d, rtol=1e-5, atol=1e-6, what="a vs b")
    assert str(gap) == "[t.ok] a vs b: equal within rtol 1e-05, atol 1e-06"
    assert 0 < gap.ratio < 1 and gap.margin > 1
    with pytest.raises(AssertionError, match="NOT equal"):
        verify.close("t.bad", d * 7 / 8, d, rtol=1e-5, atol=1e-6)
    bad = d.copy()
    bad[-1] += 1e-4  # one element off is enough
    with pytest.raises(AssertionError):
        verify.close("t.one", bad, d, rtol=1e-5, atol=1e-6)


def test_close_with_atol_0_still_fails_beside_an_element_that_is_0():
    """Planted: with atol=0, an element 0 in both arrays has a tolerance of 0; its 0/0
    must not hide the real difference next to it (it did: NaN lost to max())."""
    verify.close("t.zeros", [0.0, 1.0], [0.0, 1.0], rtol=1e-6, atol=0)
    with pytest.raises(AssertionError, match="NOT equal"):
        verify.close("t.zeros", [0.0, 1.0], [0.0, 2.0], rtol=1e-6, atol=0)
    with pytest.raises(AssertionError, match="inf times"):   # off where desired is 0
        verify.close("t.zeros", [1e-30, 1.0], [0.0, 1.0], rtol=1e-6, atol=0)


def test_close_rejects_nan_shape_and_count_mismatches():
    a = np.ones(4)
    with pytest.raises(AssertionError, match="NaN"):
        verify.close("t.nan", np.array([1.0, np.nan]), np.ones(2), rtol=1, atol=1)
    with pytest.raises(AssertionError, match="shape"):
        verify.close("t.shape", a, np.ones(5), rtol=1, atol=1)
    with pytest.raises(AssertionError, match="arrays against"):
        verify.close("t.count", [a, a], [a], rtol=1, atol=1)
    with pytest.raises(ValueError):
        verify.close("t.zero", a, a, rtol=0, atol=0)
    with pytest.raises(ValueError):
        verify.close("Bad Name", a, a, rtol=1e-5, atol=0)


def test_close_walks_dicts_in_key_order():
    a = {"w": np.ones(3), "b": np.zeros(2)}
    b = {"b": np.zeros(2), "w": np.ones(3)}
    verify.close("t.dict", a, b, rtol=1e-7, atol=0 + 1e-12)
    with pytest.raises(AssertionError):
        verify.close(
            "t.dict", a, {"b": np.zeros(2), "w": 2 * np.ones(3)}, rtol=1e-5, atol=1e-6
        )


def test_identical_is_bit_for_bit():
    x = np.arange(10, dtype=np.float32)
    assert str(verify.identical("t.id", x, x.copy())) == "[t.id] bit-identical"
    y = x.copy()
    y[3] = np.nextafter(y[3], np.float32(100))  # one unit in the last place
    with pytest.raises(AssertionError, match="NOT bit-identical"):
        verify.identical("t.id", y, x)
    s = np.zeros((5, 4), bool)
    with pytest.raises(AssertionError):
        verify.identical("t.spikes", s, s | np.eye(5, 4, dtype=bool))
    # equal values are not equal bits: -0.0 against 0.0, float32 against float64
    with pytest.raises(AssertionError, match="largest difference 0"):
        verify.identical("t.sign", np.float32([-0.0, 1]), np.float32([0.0, 1]))
    with pytest.raises(AssertionError, match="dtypes float32 against float64"):
        verify.identical("t.dtype", np.float32([0, 1]), np.float64([0, 1]))
    # NaN in both, with the same bits, is a diverged run, not an agreement
    with pytest.raises(AssertionError, match="NaN or inf"):
        verify.identical("t.nan", np.float32([np.nan, 1]), np.float32([np.nan, 1]))


def test_verdicts_are_found_by_the_margin_tests():
    for text in (
        "[ch2.rnn.grads] 8 devices vs 1 device: equal within rtol 1e-05, atol 1e-06",
        "[ch4.spikes] bit-identical",
    ):
        m = verify.VERDICT_RE.search("prefix " + text)
        assert m and m["check"] in text


def test_the_log_records_the_observed_ratio(tmp_path, monkeypatch):
    log = tmp_path / "gaps.jsonl"
    monkeypatch.setenv(verify.LOG_ENV, str(log))
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=SSE4_2")
    verify.close("t.log", np.array([1.0 + 1e-6]), np.array([1.0]), rtol=1e-5, atol=0)
    verify.identical("t.log2", np.arange(3), np.arange(3))
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["check"] for r in rows] == ["t.log", "t.log2"]
    assert rows[0]["isa"] == "SSE4_2" and rows[0]["devices"] == 4
    assert rows[0]["ratio"] == pytest.approx(0.1, rel=1e-3) and rows[1]["ratio"] == 0
