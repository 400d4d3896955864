"""Failures a cluster brings, reproduced on one machine (chapter 5c's gallery).

Each function starts real JAX processes on loopback (one simulated CPU device each, no
BrainPy), provokes one failure, and reports what happened and when, in bounded time:

* :func:`missing_rank`: a rank never starts; the others wait ``initialization_timeout``
  (JAX's default: 300 s), then JAX aborts them (SIGABRT): no Python exception to catch.
* :func:`dead_rank`: a rank is killed mid-run.  On CPU the survivor's next collective
  raises at once (Gloo: "Connection reset by peer"); its exit then waits in the shutdown
  barrier until the heartbeat timeout (JAX's default: 100 s) aborts it.  A GPU
  collective (NCCL) may instead hang until that timeout.
* :func:`compilation_cache`: 2 ranks share a ``jax_compilation_cache_dir``.  Only
  process 0 writes (``jax/_src/compiler.py``, ``_cache_write``), each write a
  ``cache_misses`` event.  On CPU the key holds the device assignment, so process 1
  never hits; on GPUs JAX strips it from multi-process keys, so every rank can.

``python -m shardbook.cluster worker ...`` is a rank's side.  Nothing here starts JAX in
the calling process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from . import child
from .multiprocess import LOOPBACK, free_port

__all__ = ["missing_rank", "dead_rank", "compilation_cache", "WORKER_PREFIX"]

WORKER_PREFIX = "SHARDBOOK-CLUSTER "


def _start(rank: int, port: int, processes: int, mode: str, **opts) -> child.Child:
    """Start one rank (``python -m shardbook.cluster worker ...``) by the book's child
    protocol (:mod:`shardbook.child`): its own session, output to files, a CPU-only
    environment."""
    return child.start(
        "shardbook.cluster", "worker", "--rank", rank, "--port", port,
        "--processes", processes, "--mode", mode, "--opts", json.dumps(opts),
        env=child.clean_env(dict(JAX_PLATFORMS="cpu")))


def _finish(procs: list[child.Child], timeout_s: float) -> list[dict]:
    """Wait for every rank (kill all at ``timeout_s``): exit code, time, reports and
    the end of stderr.  A rank reports many marked lines, not one answer: it may die
    between two of them, which is what these functions show."""
    t0, out = time.monotonic(), []
    for p in procs:
        left = max(0.1, timeout_s - (time.monotonic() - t0))
        try:
            p.proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            p.kill()
        reports = [
            json.loads(ln[len(WORKER_PREFIX) :])
            for ln in p.stdout().splitlines()
            if ln.startswith(WORKER_PREFIX)
        ]
        out.append(
            dict(
                returncode=p.proc.returncode,
                reports=reports,
                ended=time.time(),
                stderr=[
                    ln
                    for ln in p.stderr().strip().splitlines()
                    if ln.strip() and not ln.startswith("    @")
                ][-12:],
            )
        )
    return out


def missing_rank(initialization_timeout: int = 5, timeout_s: float = 120) -> dict:
    """Start rank 0 of 2, never rank 1: how long ``initialize`` waits, what it says."""
    t0 = time.monotonic()
    rank = _start(0, free_port(), 2, "init", init_timeout=initialization_timeout)
    (r,) = _finish([rank], timeout_s)
    return dict(
        seconds=time.monotonic() - t0,
        returncode=r["returncode"],
        error=next((x["error"] for x in r["reports"] if "error" in x), None),
        stderr=r["stderr"],
    )


def dead_rank(
    heartbeat_timeout: int = 10, kill_after_steps: int = 20, timeout_s: float = 180
) -> dict:
    """2 ranks run a collective every 50 ms; rank 1 is SIGKILLed after
    ``kill_after_steps``.  How rank 0 ends, and how long after the kill."""
    port = free_port()
    procs = [
        _start(
            r,
            port,
            2,
            "loop",
            heartbeat=heartbeat_timeout,
            kill_after=kill_after_steps if r == 1 else -1,
        )
        for r in (0, 1)
    ]
    results = _finish(procs, timeout_s)
    kill = next((x for x in results[1]["reports"] if x.get("event") == "kill"), None)
    steps = [x for x in results[0]["reports"] if x.get("event") == "step"]
    error = next((x for x in results[0]["reports"] if x.get("event") == "error"), None)
    return dict(
        survivor_returncode=results[0]["returncode"],
        killed_returncode=results[1]["returncode"],
        heartbeat_timeout=heartbeat_timeout,
        survivor_steps=len(steps),
        killed_step=kill and kill["step"],
        survivor_ended_s_after_kill=kill and results[0]["ended"] - kill["time"],
        survivor_error=error and error["error"],
        survivor_error_s_after_kill=error and kill and error["time"] - kill["time"],
        survivor_finished=any(x.get("event") == "end" for x in results[0]["reports"]),
        survivor_stderr=results[0]["stderr"],
    )


def compilation_cache(cache_dir=None, timeout_s: float = 240) -> dict:
    """Two runs of 2 ranks sharing one ``jax_compilation_cache_dir`` (default: a new
    temporary one): per run, each rank's cache requests, hits and writes; the files."""
    own = cache_dir is None
    cache_dir = tempfile.mkdtemp(prefix="jax-cache-") if own else str(cache_dir)
    runs = []
    for _ in range(2):
        port = free_port()
        res = _finish(
            [_start(r, port, 2, "cache", cache_dir=cache_dir) for r in (0, 1)],
            timeout_s,
        )
        ranks = []
        for rank, x in enumerate(res):
            got = next((r for r in x["reports"] if r.get("event") == "cache"), {})
            ranks.append(
                dict(
                    rank=rank,
                    returncode=x["returncode"],
                    requests=got.get("requests"),
                    hits=got.get("hits"),
                    written=got.get("misses"),
                    stderr=x["stderr"],
                )
            )
        runs.append(dict(ranks=ranks, files=sorted(os.listdir(cache_dir))))
    return dict(cache_dir=None if own else cache_dir, runs=runs)


# --------------------------------------------------------------------- a rank's side
def _report(**kw):
    print(WORKER_PREFIX + json.dumps(dict(time=time.time(), **kw)), flush=True)


def worker(rank: int, port: int, processes: int, mode: str, opts: dict) -> int:
    """One rank of a reproduced cluster failure (``mode``: init, loop or cache).

    Long because: each mode is a few lines of one rank's life (hang, die or compile)
    after the start-up that all three share, as one real rank's script would be."""
    import jax

    jax.config.update("jax_num_cpu_devices", 1)
    if mode == "cache":
        from jax import monitoring

        jax.config.update("jax_compilation_cache_dir", opts["cache_dir"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        events = {}
        monitoring.register_event_listener(
            lambda name, **kw: events.__setitem__(name, events.get(name, 0) + 1)
        )
    kwargs = dict(
        coordinator_address=f"{LOOPBACK}:{port}",
        num_processes=processes,
        process_id=rank,
        coordinator_bind_address=f"{LOOPBACK}:{port}",
        initialization_timeout=int(opts.get("init_timeout", 60)),
    )
    if "heartbeat" in opts:
        kwargs["heartbeat_timeout_seconds"] = int(opts["heartbeat"])
    try:
        jax.distributed.initialize(**kwargs)
    except Exception as err:  # what a rank sees at the timeout
        _report(error=f"{type(err).__name__}: {str(err)[:600]}")
        return 3
    from . import private

    private.gloo_on_loopback(LOOPBACK)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("p",))
    total = jax.jit(lambda x: x.sum(), out_shardings=NamedSharding(mesh, P()))
    x = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("p")), np.ones(4, np.float32)
    )
    if mode == "init":
        _report(event="initialized")
    elif mode == "loop":
        for step in range(100_000):
            if step == opts.get("kill_after", -1):
                _report(event="kill", step=step)
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                float(total(x))  # a collective across the processes
            except Exception as err:  # what the survivor's Python sees
                _report(
                    event="error",
                    step=step,
                    error=f"{type(err).__name__}: {str(err)[:400]}",
                )
                raise
            _report(event="step", step=step)
            time.sleep(0.05)
    elif mode == "cache":
        float(total(x))
        jax.jit(lambda a: (a * 2).sum(), out_shardings=NamedSharding(mesh, P()))(x)
        _report(
            event="cache",
            hits=events.get("/jax/compilation_cache/cache_hits", 0),
            misses=events.get("/jax/compilation_cache/cache_misses", 0),
            requests=events.get("/jax/compilation_cache/compile_requests_use_cache", 0),
        )
    jax.distributed.shutdown()
    _report(event="end")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("role", choices=("worker",))
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--processes", type=int, required=True)
    ap.add_argument("--mode", choices=("init", "loop", "cache"), required=True)
    ap.add_argument("--opts", default="{}")
    a = ap.parse_args(argv)
    return worker(a.rank, a.port, a.processes, a.mode, json.loads(a.opts))


if __name__ == "__main__":
    sys.exit(main())
