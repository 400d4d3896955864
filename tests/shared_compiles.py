"""Compiles shared by the test files of one pytest session.

GPU-target programs are read from the store that ``lab/gpu_programs.py`` writes
(``gputarget.programs``): test modules :func:`register` their jobs when pytest imports
them, and the first :func:`gpu` call reads all of them.  One the store lacks would
compile in ONE child process with a ``NotStoredWarning``, which pyproject.toml makes an
error in the tests; a stale one is read as stored, and ``tests/test_gputarget.py``
names it.  CPU compiles
(``gputarget.compile_here``) are cached by builder, sizes and device count.
"""

import json

from shardbook import gputarget

STEPS = "shardbook.gputarget_steps:"
_JOBS: dict = {}
_GPU: dict = {}
_CPU: dict = {}


def _key(builder, kwargs, target, devices, hosts):
    return (builder, json.dumps(kwargs or {}, sort_keys=True), target, devices, hosts)


def register(
    builder: str,
    kwargs: dict | None = None,
    *,
    target: str = "h200",
    devices: int = 8,
    hosts: int = 1,
) -> tuple:
    """Add a GPU-target job (``builder`` is a name in shardbook.gputarget_steps)."""
    key = _key(builder, kwargs, target, devices, hosts)
    _JOBS.setdefault(
        key,
        {
            "builder": STEPS + builder,
            "kwargs": kwargs or {},
            "target": target,
            "devices": devices,
            "hosts": hosts,
        },
    )
    return key


def gpu(key: tuple):
    """The Program of a registered job (all jobs read together, once)."""
    if key not in _GPU:
        todo = [k for k in _JOBS if k not in _GPU]
        programs = gputarget.programs([_JOBS[k] for k in todo], timeout=580)
        _GPU.update(zip(todo, programs))
    return _GPU[key]


def gpu_programs(jobs: dict) -> dict:
    """``{name: Program}`` of registered jobs ``{name: key}``; skips the test where a
    job is not stored and the GPU-target wheels are not installed."""
    import pytest

    from shardbook import gputarget as gt
    found = all(gt.stored(_JOBS[k]) is not None for k in jobs.values())
    if not found and not gt.wheels_installed():
        pytest.skip(
            f"GPU-target wheels not installed in {gt.target_dir()}: run "
            "ci/install_gpu_target"
        )
    return {name: gpu(key) for name, key in jobs.items()}


def here(builder: str, kwargs: dict | None = None, devices: int | None = None):
    """``compile_here`` of ``builder``, once per session."""
    key = _key(builder, kwargs, "cpu", devices, 1)
    if key not in _CPU:
        _CPU[key] = gputarget.compile_here(
            STEPS + builder, devices=devices, **(kwargs or {})
        )
    return _CPU[key]
