"""Brian 2's modes in the timing file (lab/coba_reference.py ``timing``), no Brian 2.

* the two rate-function forms of lab/brian2_coba.py are one function: "exprel" (the
  example's text at tag 2.9.0) and "exp" (its form before 2019) agree to 1e-12;
* the summary of the stored file, recomputed by today's ``summarize``, is the stored
  summary (old files read the same way);
* a file with the new rows (cython/exp, cpp_standalone) validates, and the readers of
  chapter 4 (04a, 04b) find what they look up: "brian2" is still cython with exprel,
  every summary row has ``vs_brian2``, and no Brian row is named ``book/...``.
"""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "ci"))
sys.path.insert(0, str(ROOT / "lab"))
import brian2_coba  # noqa: E402  (numpy only at import)
import coba_reference  # noqa: E402
import regime_runs as design  # noqa: E402  (lab/regime_runs.py)

STORED = ROOT / "book" / "data" / "coba_brian2_timing.json"

# examples/COBAHH.py at tag 2.9.0 (commit 31f945d4), lines 53, 54 and 57
EXAMPLE_RATES = (
    "alpha_m = 0.32*(mV**-1)*4*mV/exprel((13*mV-v+VT)/(4*mV))/ms : Hz",
    "beta_m = 0.28*(mV**-1)*5*mV/exprel((v-VT-40*mV)/(5*mV))/ms : Hz",
    "alpha_n = 0.032*(mV**-1)*5*mV/exprel((15*mV-v+VT)/(5*mV))/ms : Hz",
)


def _rates(form, v):
    """The three rates of ``form`` at membrane potentials ``v`` (volt), in Hz."""
    text = re.sub(r"\n\s+", " ", brian2_coba.RATES[form].strip())
    env = dict(
        mV=1e-3, ms=1e-3, VT=-63e-3, v=v, exp=np.exp, exprel=lambda x: np.expm1(x) / x
    )
    out = {}
    for line in text.splitlines():
        name, expr = line.split(":")[0].split("=", 1)
        out[name.strip()] = eval(expr, env)  # noqa: S307 (our own constant text)
    return out


def test_the_two_rate_forms_are_one_function():
    assert all(line in brian2_coba.RATES["exprel"] for line in EXAMPLE_RATES)
    assert brian2_coba.EQS == brian2_coba.equations("exprel")
    # away from the removable singularities (v = VT + 13, VT + 40, VT + 15 mV)
    v = np.linspace(-90e-3, 50e-3, 1401) + 0.37e-5
    a, b = _rates("exprel", v), _rates("exp", v)
    assert set(a) == set(b) == {"alpha_m", "beta_m", "alpha_n"}
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-9, err_msg=name)
    planted = dict(b, alpha_m=b["alpha_m"] * (1 + 1e-6))
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(a["alpha_m"], planted["alpha_m"], rtol=1e-9)


def test_brian2_keeps_its_name_and_meaning():
    who, mode, rates = coba_reference.BRIAN_MODES["cython/exprel"]
    assert (who, mode, rates) == ("brian2", "cython", "exprel")
    names = [w for w, _, _ in coba_reference.BRIAN_MODES.values()]
    assert len(set(names)) == len(names)
    assert all(w.startswith("brian2") for w in names)
    assert coba_reference.EXAMPLE["rates"] == "exprel"


def _stored():
    assert STORED.exists(), "book/data/coba_brian2_timing.json is missing (page 4b)"
    return json.loads(STORED.read_text())


def test_the_stored_summary_is_recomputed_the_same():
    data = _stored()
    new = {(r["neurons"], r["who"]): r for r in coba_reference.summarize(data)}
    for old in data["summary"]:
        got = new[old["neurons"], old["who"]]
        for key in ("s_per_sim_s", "vs_brian2", "vs_brian2_marginal", "reps"):
            if key in old:
                assert got[key] == pytest.approx(old[key], rel=1e-12), (old, key)


def test_a_file_with_the_new_rows_reads_as_before():
    data = _stored()
    # the first version's rows only: Brian 2 in cython with exprel, and the book's
    first = [r for r in data["rows"]
             if r["who"] == "brian2" or r["who"].startswith("book/")]
    rows = [
        dict(r, mode="cython", rates="exprel") if r["who"] == "brian2" else r
        for r in first
    ]
    for r in list(rows):
        if r["who"] != "brian2":
            continue
        rows.append(
            dict(r, who="brian2/cython/exp", rates="exp", seconds=0.8 * r["seconds"])
        )
        extra = {k: r[k] for k in ("neurons", "rep", "sim_ms", "spikes")}
        rows.append(
            dict(
                extra,
                who="brian2/cpp_standalone",
                mode="cpp_standalone",
                rates="exprel",
                seconds=0.5 * r["seconds"],
                process_seconds=0.6 * r["seconds"],
            )
        )
    data = dict(data, rows=rows)
    data["summary"] = coba_reference.summarize(data)
    design.validate(data)
    summary = data["summary"]
    assert all("vs_brian2" in r and "s_per_sim_s" in r for r in summary)
    # 04a: seconds per simulated second by (size, who)
    cpu = {(r["neurons"], r["who"]): r["s_per_sim_s"] for r in summary}
    ratio = {(r["neurons"], r["who"]): r["vs_brian2"] for r in summary}
    for size in data["sizes"]:
        assert ratio[size, "brian2"] == 1.0
        assert ratio[size, "brian2/cpp_standalone"] == pytest.approx(0.5)
        assert ratio[size, "brian2/cython/exp"] == pytest.approx(0.8)
        push = cpu[size, "book/push"]
        # 04b: the book's rows only
        book_rows = sorted(w for (s, w) in ratio if s == size and w.startswith("book/"))
        assert book_rows == [f"book/{d}" for d in sorted(data["deliveries"])]
        row = next(
            r for r in summary if r["neurons"] == size and r["who"] == "book/push"
        )
        assert row["vs"]["brian2/cpp_standalone"] == pytest.approx(
            push / cpu[size, "brian2/cpp_standalone"]
        )
        mode = {r["who"]: r.get("mode") for r in summary if r["neurons"] == size}
        assert mode["brian2"] == "cython"
        assert mode["brian2/cpp_standalone"] == "cpp_standalone"
