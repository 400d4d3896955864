"""Equivalence checks with a stated tolerance, and a record of how close each came.

Each claim "the sharded run equals the one-device run" is one call of :func:`close`
(within a float tolerance, the criterion of ``numpy.testing.assert_allclose``) or
:func:`identical` (bit for bit).  Both raise ``AssertionError`` when the claim breaks
and return a :class:`Gap` that prints as a *verdict*: the check and its tolerance,
never the observed difference, which depends on the host CPU and so cannot be a
stored output.

With ``BOOK_GAP_LOG=/path/to/log.jsonl`` set, every check appends one JSON line (name,
tolerance, worst ratio ``|a - b| / (atol + rtol |b|)``, device count, XLA:CPU ISA);
``lab/margins`` collects them so that a test can require every tolerance to be at least
10 times the worst case observed.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LOG_ENV", "isa", "Gap", "close", "identical", "VERDICT_RE"]

LOG_ENV = "BOOK_GAP_LOG"
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")


def _leaves(x: Any) -> list[np.ndarray]:
    """Arrays in ``x``: an array, a BrainPy Variable, or a dict/list/tuple of them."""
    if isinstance(x, dict):
        return [a for k in sorted(x, key=str) for a in _leaves(x[k])]
    if isinstance(x, (list, tuple)):
        return [a for v in x for a in _leaves(v)]
    value = getattr(x, "value", x)  # brainpy.math.Array / Variable wrap a jax.Array
    return [np.asarray(value)]


def isa() -> str:
    """The XLA:CPU vector ISA this process was told to use (``native`` if none)."""
    m = re.search(r"--xla_cpu_max_isa=(\S+)", os.environ.get("XLA_FLAGS", ""))
    return m.group(1) if m else "native"


@dataclass(frozen=True)
class Gap:
    """The outcome of one check.  ``str(gap)`` is a machine-independent verdict."""

    check: str
    what: str
    rtol: float
    atol: float
    ratio: float        # worst |a - b| / (atol + rtol |b|); 0 when bit-identical
    max_abs: float      # worst |a - b|
    exact: bool         # checked bit for bit

    @property
    def margin(self) -> float:
        """How many times the tolerance exceeds the worst observed difference."""
        return float("inf") if self.ratio == 0 else 1.0 / self.ratio

    def __str__(self) -> str:
        what = f"{self.what}: " if self.what else ""
        if self.exact:
            return f"[{self.check}] {what}bit-identical"
        return (
            f"[{self.check}] {what}equal within rtol {self.rtol:g}, atol {self.atol:g}"
        )


def _log(gap: Gap) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    try:
        import jax

        devices, platform = jax.device_count(), jax.devices()[0].platform
    except Exception:  # pragma: no cover - JAX always importable in the book
        devices, platform = None, None
    row = dict(check=gap.check, rtol=gap.rtol, atol=gap.atol, exact=gap.exact,
               ratio=gap.ratio, max_abs=gap.max_abs, devices=devices, platform=platform,
               isa=isa(), notebook=os.environ.get("BOOK_NOTEBOOK", ""))
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def _pairs(check: str, actual: Any, desired: Any):
    if not _NAME_RE.match(check):
        raise ValueError(
            f"check name {check!r}: use lower case, digits and '.', e.g. 'ch2.grads'"
        )
    a, d = _leaves(actual), _leaves(desired)
    if len(a) != len(d):
        raise AssertionError(f"[{check}] {len(a)} arrays against {len(d)}")
    for i, (x, y) in enumerate(zip(a, d)):
        if x.shape != y.shape:
            raise AssertionError(
                f"[{check}] array {i}: shape {x.shape} against {y.shape}"
            )
    return a, d


def close(check: str, actual: Any, desired: Any, *, rtol: float, atol: float,
          what: str = "") -> Gap:
    """Assert ``|actual - desired| <= atol + rtol * |desired|`` element-wise.

    ``check`` names the claim (unique in the book, e.g. ``"ch2.rnn.grads"``); ``what``
    says what is compared (``"8 devices vs 1 device"``).  NaN or inf anywhere fails.
    Returns the :class:`Gap`; print it for the verdict.  ``ValueError`` unless one
    tolerance is positive and neither is negative, or for a malformed ``check`` name."""
    if rtol < 0 or atol < 0 or (rtol == 0 and atol == 0):
        raise ValueError(
            "give a positive rtol or atol (use identical() for bit-equality)"
        )
    a, d = _pairs(check, actual, desired)
    ratio = max_abs = 0.0
    for i, (x, y) in enumerate(zip(a, d)):
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        if not (np.all(np.isfinite(x64)) and np.all(np.isfinite(y64))):
            raise AssertionError(f"[{check}] array {i} holds NaN or inf")
        diff = np.abs(x64 - y64)
        if diff.size:
            tol = atol + rtol * np.abs(y64)   # 0 where atol is 0 and desired is 0
            with np.errstate(divide="ignore", invalid="ignore"):
                # an equal element is 0 times its tolerance, even a tolerance of 0
                # (0 / 0 would be NaN, and max() would pass over it); any other
                # difference over a tolerance of 0 is infinitely many
                share = np.where(diff == 0, 0.0, diff / tol)
            ratio = max(ratio, float(np.max(share)))
            max_abs = max(max_abs, float(np.max(diff)))
    gap = Gap(check, what, rtol, atol, ratio, max_abs, exact=False)
    _log(gap)
    if ratio > 1:
        raise AssertionError(
            f"[{check}] {what + ': ' if what else ''}NOT equal within rtol {rtol:g}, "
            f"atol {atol:g}: worst difference {max_abs:.3g} is {ratio:.3g} times the "
            "tolerance")
    return gap


def identical(check: str, actual: Any, desired: Any, *, what: str = "") -> Gap:
    """Assert that ``actual`` and ``desired`` are equal bit for bit: the same shapes,
    dtypes and bytes (so ``-0.0`` is not ``0.0``, and float32 is not float64).  NaN or
    inf anywhere fails, as in :func:`close`: two runs that both diverged agree."""
    a, d = _pairs(check, actual, desired)
    for i, (x, y) in enumerate(zip(a, d)):
        if any(z.dtype.kind in "fc" and not np.all(np.isfinite(z)) for z in (x, y)):
            raise AssertionError(f"[{check}] array {i} holds NaN or inf")
    bad = [i for i, (x, y) in enumerate(zip(a, d))
           if x.dtype != y.dtype or x.tobytes() != y.tobytes()]
    max_abs = 0.0
    for i in bad:
        x, y = a[i], d[i]
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            max_abs = max(max_abs, float(np.nanmax(np.abs(x.astype(np.float64) - y))))
        else:
            max_abs = max(max_abs, float(np.sum(x != y)))
    gap = Gap(
        check, what, 0.0, 0.0, 0.0 if not bad else float("inf"), max_abs, exact=True
    )
    _log(gap)
    if bad:
        dtypes = [f"{a[i].dtype} against {d[i].dtype}" for i in bad
                  if a[i].dtype != d[i].dtype]
        raise AssertionError(
            f"[{check}] {what + ': ' if what else ''}NOT bit-identical "
            f"(arrays {bad}; largest difference {max_abs:.3g}"
            f"{'; dtypes ' + ', '.join(dtypes) if dtypes else ''})"
        )
    return gap


VERDICT_RE = re.compile(
    r"\[(?P<check>[a-z0-9][a-z0-9_.\-]*)\] (?:[^\n]*: )?"
    r"(?:equal within rtol (?P<rtol>\S+), atol (?P<atol>\S+)|bit-identical)")
"""Finds verdicts in stored notebook outputs (used by the tests of the margins)."""
