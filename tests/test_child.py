"""shardbook.child: the one child-process protocol (clean environment, JSON back).

Each child here is a few lines of Python: one that answers, one that fails, one that
answers nothing, one that hangs past its timeout, and several waited for together.
"""

import os
import time

import pytest

from shardbook import child

ANSWERS = """
import json, os, sys
from shardbook import child
data = json.loads(sys.stdin.read())
print("some chatter first")
child.answer(dict(got=data, env={k: os.environ.get(k) for k in sys.argv[1:]},
                       path=sys.path))
"""


def _script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_clean_env_drops_device_settings_unless_kept(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("JAX_ENABLE_X64", "1")
    monkeypatch.setenv("BOOK_NUM_DEVICES", "8")
    monkeypatch.setenv("BOOK_GAP_LOG", "gaps.jsonl")
    monkeypatch.setenv(
        "XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_cpu_x=1"
    )
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = child.clean_env()
    assert not [k for k in env if k.startswith(("JAX_", "XLA_"))]
    assert "BOOK_NUM_DEVICES" not in env and env["BOOK_GAP_LOG"] == "gaps.jsonl"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(child.REPO), "/elsewhere"]
    assert env["PYTHONUNBUFFERED"] == "1"
    kept = child.clean_env(dict(JAX_PLATFORMS="cpu"), keep=("XLA_FLAGS",), paths=["/w"])
    assert kept["XLA_FLAGS"] == "--xla_cpu_x=1"  # less the forced device count
    assert kept["JAX_PLATFORMS"] == "cpu" and "JAX_ENABLE_X64" not in kept
    assert kept["PYTHONPATH"].split(os.pathsep)[:2] == ["/w", str(child.REPO)]
    everything = child.clean_env(keep=("JAX_*", "BOOK_NUM_DEVICES"))
    assert everything["JAX_ENABLE_X64"] == "1" and everything["BOOK_NUM_DEVICES"] == "8"


def test_a_child_that_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    script = _script(tmp_path, "answers.py", ANSWERS)
    got = child.run(
        script,
        "JAX_PLATFORMS",
        "PYTHONUNBUFFERED",
        input='{"n": 3}',
        timeout=60,
        cwd=tmp_path,
    )
    assert got["got"] == {"n": 3}
    assert got["env"] == {"JAX_PLATFORMS": None, "PYTHONUNBUFFERED": "1"}
    assert str(child.REPO) in got["path"]  # found shardbook without an install


def test_the_answer_is_the_last_marked_line():
    text = f"x\n{child.MARK}[1]\nnoise\n{child.MARK}" + '{"a": 2}\n'
    assert child.read_answer(text) == {"a": 2}
    with pytest.raises(LookupError):
        child.read_answer("no answer here\n")


def test_a_child_that_fails_shows_its_stderr(tmp_path):
    script = _script(
        tmp_path,
        "fails.py",
        "import sys\nprint('line 1', file=sys.stderr)\n"
        "raise SystemExit('the reason it failed')\n",
    )
    with pytest.raises(
        child.ChildError,
        match=r"(?s)failed \(exit code 1\).*"
        "line 1.*the reason it failed",
    ) as info:
        child.run(script, timeout=60)
    assert info.value.returncode == 1 and "the reason" in info.value.stderr


def test_what_a_failed_child_wrote_is_kept(tmp_path):
    """Planted: a child that answers, then fails.  Its output is still there for the
    caller (lab/gpu_check.py keeps the phases it answered; the files were closed)."""
    script = _script(tmp_path, "late.py", "from shardbook import child\n"
                     "child.answer({'phase': 'compile'})\nraise SystemExit(3)\n")
    proc = child.start(script, timeout=60)
    with pytest.raises(child.ChildError, match=r"exit code 3"):
        proc.result()
    assert child.read_answer(proc.stdout()) == {"phase": "compile"}
    assert proc.stderr() == ""


def test_a_child_that_answers_nothing(tmp_path):
    script = _script(tmp_path, "silent.py", "print('done, but no answer')\n")
    with pytest.raises(child.ChildError, match="without an answer"):
        child.run(script, timeout=60)


def test_a_child_that_hangs_is_killed_at_its_timeout(tmp_path):
    script = _script(
        tmp_path,
        "hangs.py",
        "import sys, time\n"
        "print('waiting forever', file=sys.stderr, flush=True)\n"
        "time.sleep(600)\n",
    )
    t0 = time.monotonic()
    proc = child.start(script, timeout=2)
    with pytest.raises(child.ChildTimeout, match=r"(?s)within 2 s.*waiting forever"):
        proc.result()
    assert time.monotonic() - t0 < 30
    assert proc.proc.returncode < 0  # killed by a signal
    assert isinstance(child.ChildTimeout("x"), TimeoutError)


def test_wait_all_stops_every_child_when_one_fails(tmp_path):
    hang = _script(tmp_path, "hang.py", "import time\ntime.sleep(600)\n")
    fail = _script(
        tmp_path,
        "fail.py",
        "import time\ntime.sleep(0.5)\nraise SystemExit('worker 1 broke')\n",
    )
    kids = [child.start(hang, name="process 0"), child.start(fail, name="process 1")]
    t0 = time.monotonic()
    with pytest.raises(child.ChildError, match=r"(?s)process 1 failed.*worker 1 broke"):
        child.wait_all(kids, timeout=60)
    assert time.monotonic() - t0 < 30
    assert all(k.poll() is not None for k in kids)


def test_wait_all_timeout_kills_all(tmp_path):
    hang = _script(tmp_path, "hang.py", "import time\ntime.sleep(600)\n")
    kids = [child.start(hang, name=f"process {i}") for i in range(2)]
    with pytest.raises(TimeoutError, match="all were killed"):
        child.wait_all(kids, timeout=1)
    assert all(k.proc.returncode < 0 for k in kids)


def test_a_module_child_found_through_paths(tmp_path):
    (tmp_path / "answering_module.py").write_text(
        "import sys\nfrom shardbook import child\nchild.answer(sys.argv[1:])\n"
    )
    env = child.clean_env(paths=[tmp_path])
    assert child.run("answering_module", "a", 2, env=env, timeout=60) == ["a", "2"]
