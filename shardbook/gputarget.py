"""Compile a step for a GPU without a GPU: what 8 x H200 (or H100) would run.

XLA's GPU compiler runs other passes than its CPU compiler, so the collectives and
temporaries of a sharded step differ between simulated CPU devices and real GPUs.
JAX can compile for a GPU on a machine that has none (JAX docs, "Ahead-of-time
lowering and compilation"): describe the target with XLA's device spec
(``gpu_specs/*.txtpb``, from openxla/xla) and ``jax.experimental.topologies``, give
every input as a ``jax.ShapeDtypeStruct`` with a ``NamedSharding`` on that mesh, and
compile.  ``.as_text()`` is the GPU program and ``.memory_analysis()`` one device's
bytes.

That needs JAX's CUDA plugin, its PJRT library and ptxas (``PINS``), which the
notebook's own kernel must never see.  So the wheels go into their own folder
(:func:`install`), and every GPU-target compile runs in a **child process** that alone
has that folder on its ``PYTHONPATH``.  A job names its builder
(``"shardbook.gputarget_steps:rnn_data_parallel"``) and keyword arguments; the child
answers with :meth:`shardbook.hlo.Program.to_json`.  :func:`compile_here` runs the same
builder on this process's own devices, for the side-by-side view.

This module imports neither JAX nor BrainPy when it is imported.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

from . import child, data_dir

__all__ = [
    "PINS", "REFRESH", "STORE_DIR", "TARGETS", "GpuTargetError", "NotStoredWarning",
    "Pending", "Target", "compile_here", "compile_jobs", "device_info", "install",
    "job_key", "normal_job", "programs", "spec_text", "start_jobs", "stored",
    "target_dir", "wheels_installed", "wheels_stamp",
]

# The wheels, pinned exactly (ci/requirements-gpu-target.txt says the same; tested).
PINS = ("jax-cuda12-plugin==0.10.2", "jax-cuda12-pjrt==0.10.2",
        "nvidia-cuda-nvcc-cu12==12.9.86")

SPEC_DIR = Path(__file__).resolve().parent / "gpu_specs"
# name -> (spec file, what to call it)
TARGETS = {"h200": ("h200.txtpb", "NVIDIA H200"),
           "h100_sxm": ("h100_sxm.txtpb", "NVIDIA H100 SXM")}
_ALIASES = {"h100": "h100_sxm", "h100-sxm": "h100_sxm", "h100 sxm": "h100_sxm"}


class NotStoredWarning(UserWarning):
    """A GPU program the store lacks, compiled here instead (the tests make it an
    error: pyproject.toml)."""


class GpuTargetError(RuntimeError):
    """A GPU-target compile could not run (no wheels, the child failed or timed out)."""


# ------------------------------------------------------------------------ installation
def target_dir() -> Path:
    """Where the wheels live: ``$BOOK_GPU_TARGET_DIR``, else ``<venv>/gpu-target``."""
    return Path(os.environ.get("BOOK_GPU_TARGET_DIR", Path(sys.prefix) / "gpu-target"))


def wheels_stamp() -> str:
    """A digest of ``PINS``: what the wheels folder's stamp file records."""
    return hashlib.sha256("\n".join(PINS).encode()).hexdigest()[:16]


def wheels_installed(path=None) -> bool:
    """True when :func:`install` completed for exactly ``PINS`` in ``path``."""
    path = Path(path) if path is not None else target_dir()
    stamp = path / ".gputarget-stamp"
    return (stamp.exists() and stamp.read_text().strip() == wheels_stamp()
            and (path / "jax_plugins" / "xla_cuda12").is_dir()
            and (path / "nvidia" / "cuda_nvcc" / "bin" / "ptxas").exists())


def install(path=None, verbose: bool = True) -> float:
    """Install ``PINS`` with ``pip --target`` into ``path`` (default
    :func:`target_dir`), once.

    Idempotent: a stamp file records the pins; a second call returns at once.
    ``--no-deps`` keeps the CUDA runtime wheels out (a compile needs only the plugin,
    PJRT and ptxas).  Returns the seconds spent (0.0 when nothing was done).
    """
    path = Path(path) if path is not None else target_dir()
    if wheels_installed(path):
        if verbose:
            print(f"[gpu-target] reusing {path} (pins unchanged)")
        return 0.0
    t0 = time.perf_counter()
    path.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--no-deps", "--upgrade", "--target", str(path), *PINS]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise GpuTargetError("pip could not install the GPU-target wheels:\n"
                             f"{done.stderr[-3000:]}")
    (path / ".gputarget-stamp").write_text(wheels_stamp() + "\n")
    seconds = time.perf_counter() - t0
    if verbose:
        print(f"[gpu-target] installed {', '.join(PINS)} into {path} in "
              f"{seconds:.0f} s")
    return seconds


def spec_text(target: str) -> str:
    """XLA's device spec of ``target`` ('h200' or 'h100_sxm'), licence included."""
    return (SPEC_DIR / TARGETS[_name(target)][0]).read_text()


def device_info(target: str) -> dict:
    """The integer fields of a target's ``gpu_device_info`` (``core_count``,
    ``device_memory_size``, ...), read from its spec."""
    body = spec_text(target).split("gpu_device_info {", 1)[1]
    found = re.findall(r"^\s*(\w+):\s*(\d+)\s*$", body, flags=re.MULTILINE)
    return {k: int(v) for k, v in found}


def _name(target: str) -> str:
    key = target.lower()
    key = _ALIASES.get(key, key)
    if key not in TARGETS:
        raise ValueError(f"unknown GPU target {target!r}; known: {', '.join(TARGETS)}")
    return key


# ------------------------------------------------------------- the builders' interface
class Target:
    """What a builder receives: where to build the model, how to describe the inputs.

    A builder builds its model on :meth:`build_devices` (devices that can hold arrays:
    the child's simulated CPU devices, or the notebook's own devices), wrapped in a mesh
    of the same shape and axis names as :meth:`mesh`, the mesh it is compiled for.  Then
    it returns ``(jitted_function, args)``, the arguments made abstract on the compile
    mesh with :meth:`struct` or :meth:`bm_step`.

    ``Target("cpu", devices)`` (what :func:`compile_here` uses) builds and compiles on
    this process's own lesson devices (the first ``devices`` of
    :func:`shardbook.book.devices`); then both meshes are the same.
    """

    def __init__(self, kind: str = "h200", devices: int | None = None, hosts: int = 1):
        self.kind = "cpu" if kind == "cpu" else _name(kind)
        # the lesson devices (all of jax.devices() before setup)
        if self.kind == "cpu":
            from .devices import lesson_devices

            self.devices = lesson_devices()[:devices]
            self.description = (f"{len(self.devices)} x {self.devices[0].device_kind} "
                                "(this process)")
        else:
            from jax.experimental import topologies

            # region: gputarget.topology
            devices = 8 if devices is None else devices
            topo = topologies.get_topology_desc(
                platform="cuda", topology=f"1x{hosts}x{devices}",
                target_config=spec_text(self.kind))   # the GPU's text proto
            self.devices = list(topo.devices)   # compile-only devices, no memory
            # endregion
            self.description = (f"{hosts * devices} x {TARGETS[self.kind][1]}"
                                + (f" ({hosts} hosts)" if hosts > 1 else ""))
        self.n = len(self.devices)
        self._mesh = None

    def build_devices(self, shape=None):
        """Devices to build the model on, an array of ``shape`` (default: all, 1-D)."""
        import jax
        import numpy as np

        devs = self.devices if self.kind == "cpu" else jax.devices()[: self.n]
        if len(devs) < self.n:
            raise GpuTargetError(f"the child has {len(devs)} CPU devices to build on, "
                                 f"{self.n} needed")
        return np.array(devs).reshape(shape if shape is not None else (self.n,))

    # region: gputarget.struct
    def mesh(self, shape=None, names=("x",)):
        """The mesh to compile for (compile-only GPU devices, or this process's)."""
        import numpy as np
        from jax.sharding import Mesh

        shape = tuple(shape) if shape is not None else (self.n,)
        self._mesh = Mesh(np.array(self.devices).reshape(shape), tuple(names))
        return self._mesh

    def sharding(self, spec=None):
        """``NamedSharding(self.mesh(...), spec)``; ``None`` gives replicated."""
        from jax.sharding import NamedSharding, PartitionSpec as P

        if self._mesh is None:
            raise GpuTargetError("call target.mesh(shape, names) first")
        return NamedSharding(self._mesh, spec if spec is not None else P())

    def struct(self, shape, dtype, spec=None):
        """An abstract input: ``jax.ShapeDtypeStruct`` on the compile mesh."""
        import jax

        return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=self.sharding(spec))
    # endregion

    def bm_step(self, step, *args, resize=None):
        """A BrainPy ``bm.jit`` function as ``(plain jax.jit, (state_values, *args))``.

        A ``bm.jit`` function holds a plain ``jax.jit`` of ``(state_values, *args)``
        (brainstate ``transform/_jit.py``; read through
        :func:`shardbook.private.bm_jit_parts`).  ``resize``: a function of a state's
        shape that gives the shape to compile for; the state then holds a zero-memory
        stand-in of that shape (``np.broadcast_to``) while it is traced.  Shardings the
        model keeps must point at :meth:`mesh` before this call: it traces.
        """
        from . import private

        specs = {}
        if resize is not None:
            import numpy as np

            def stand_in(state, old):
                specs[id(state)] = getattr(old, "sharding", None)
                shape = tuple(resize(tuple(np.shape(old))))
                return np.broadcast_to(np.zeros((), np.dtype(old.dtype)), shape)

            private.replace_state_values(step, args, stand_in)
        jitted, states, values = private.bm_jit_parts(step, *args)
        structs = tuple(
            self._struct_like(v, specs.get(id(s), getattr(v, "sharding", None)))
            for s, v in zip(states, values))
        return jitted, (structs, *args)

    def _struct_like(self, value, sharding):
        import numpy as np
        from jax.sharding import NamedSharding

        spec = sharding.spec if isinstance(sharding, NamedSharding) else None
        return self.struct(np.shape(value), value.dtype, spec)


# ------------------------------------------------------------------------------ running
def _builder(name: str):
    module, _, attr = name.partition(":")
    if not attr:
        raise ValueError(f"builder must be 'module:function', got {name!r}")
    return getattr(importlib.import_module(module), attr)


def _compile_job(job: dict, target: Target):
    """Build ``job``'s step on ``target``, compile it, and read it: a Program."""
    from .hlo import Program

    t0 = time.perf_counter()
    fn, args = _builder(job["builder"])(target, **job.get("kwargs", {}))
    t1 = time.perf_counter()
    compiled = fn.trace(*args).lower().compile()
    mesh = target._mesh
    meta = {"target": target.description, "builder": job["builder"],
            "kwargs": job.get("kwargs", {}), "compile_s": time.perf_counter() - t1,
            "build_s": t1 - t0,
            "mesh": {k: int(v) for k, v in dict(mesh.shape).items()} if mesh else {}}
    bytes_accessed = _bytes_accessed(compiled)
    if bytes_accessed is not None:   # XLA:CPU's cost analysis; a GPU target has none
        meta["bytes_accessed"] = bytes_accessed
    return Program(compiled, meta=meta)


def _bytes_accessed(compiled) -> float | None:
    """The ``"bytes accessed"`` of XLA's cost analysis of ``compiled``, or None."""
    try:
        cost = compiled.cost_analysis()
    except Exception:   # a compile-only GPU target may refuse to analyse
        return None
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    if not cost or "bytes accessed" not in cost:
        return None
    return float(cost["bytes accessed"])


def _run_job(job: dict, target: Target) -> dict:
    """What the child sends back for one job: the Program as JSON."""
    return _compile_job(job, target).to_json()


def _answer(answer: dict):
    """The Program the child's JSON answer describes (its child seconds in ``meta``)."""
    from .hlo import Program

    prog = Program.from_json(answer)
    if "child_s" in answer:
        prog.meta["child_s"] = answer["child_s"]
    return prog


def compile_here(builder: str, *, devices: int | None = None, **kwargs):
    """Build and compile ``builder(**kwargs)`` on this process's own devices (the first
    ``devices`` of them; default all), with no child: the side-by-side view.  Returns
    a :class:`shardbook.hlo.Program`."""
    return _compile_job({"builder": builder, "kwargs": kwargs}, Target("cpu", devices))


def _child_env(cpu_devices: int, path: Path) -> dict:
    """The compile child's environment (:func:`shardbook.child.clean_env`): CPU only,
    ``XLA_FLAGS`` less a forced device count, plus the pinned CUDA toolkit; the wheels'
    folder first on ``PYTHONPATH``."""
    ptxas_root = path / "nvidia" / "cuda_nvcc"
    env = child.clean_env(dict(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
                               BOOK_GPU_TARGET_CPU_DEVICES=str(cpu_devices)),
                          keep=("XLA_FLAGS",), paths=[path])
    # the pinned toolkit, not a system one
    flags = env.get("XLA_FLAGS", "").split() + [f"--xla_gpu_cuda_data_dir={ptxas_root}"]
    env["XLA_FLAGS"] = " ".join(flags)
    return env


class Pending:
    """A GPU-target compile running in its child process; :meth:`result` waits for
    it."""

    def __init__(self, jobs: list[dict], timeout: float, path: Path):
        self.jobs, self.timeout = jobs, timeout
        cpu_devices = max(j.get("devices", 8) * j.get("hosts", 1) for j in jobs)
        self._child = child.start(
            "shardbook.gputarget",
            "child",
            input=json.dumps(jobs),
            env=_child_env(cpu_devices, path),
            timeout=timeout,
            name="the GPU-target child",
        )
        self._results = None

    def result(self) -> list[dict]:
        """One Program JSON (:meth:`shardbook.hlo.Program.to_json`) per job; raises
        :class:`GpuTargetError` on any failure."""
        if self._results is not None:
            return self._results
        try:
            results = self._child.result()
        except child.ChildTimeout:
            names = ", ".join(j["builder"].split(":")[-1] for j in self.jobs)
            raise GpuTargetError(
                f"GPU-target compile of {len(self.jobs)} job(s) did not finish within "
                f"{self.timeout:g} s ({names}); the child was stopped"
            ) from None
        except child.ChildError as e:
            raise GpuTargetError(str(e)) from None
        for job, res in zip(self.jobs, results):
            if "error" in res:
                raise GpuTargetError(f"{job['builder']} {job.get('kwargs', {})} on "
                                     f"{job.get('target', 'h200')}:\n{res['error']}")
        self._results = results
        return results


# ------------------------------------------------------------ the stored programs
# A GPU-target compile takes seconds per step on a machine without a GPU, and a page
# shows a dozen of them.  So pages read the programs that ``lab/gpu_programs.py``
# compiled into STORE_DIR, one file per job.  That script also records what each was
# made from, and ``tests/test_gputarget.py`` fails when one is stale.
STORE_DIR = data_dir() / "gpu_programs"
REFRESH = "python lab/gpu_programs.py"   # the command that compiles and stores


def normal_job(job: dict) -> dict:
    """``job`` with its defaults written out: what names a stored program."""
    target = job.get("target", "h200")
    out = {"builder": job["builder"], "kwargs": dict(job.get("kwargs", {})),
           "target": target if target == "cpu" else _name(target),
           "devices": int(job.get("devices") or 8), "hosts": int(job.get("hosts", 1))}
    extra = set(job) - set(out)
    if extra:
        raise ValueError(f"unknown job key(s) {sorted(extra)}: a job has {sorted(out)}")
    return out


def job_key(job: dict) -> str:
    """The stored file's name for ``job`` (its normal form, hashed)."""
    text = json.dumps(normal_job(job), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def stored(job: dict, folder=None) -> dict | None:
    """The stored record of ``job``, or None: a child's Program JSON, with ``job``,
    ``made_from``, ``made_by``, and the file's path in ``meta["stored"]``."""
    f = Path(folder or STORE_DIR) / f"{job_key(job)}.json.gz"
    if not f.exists():
        return None
    record = json.loads(gzip.decompress(f.read_bytes()))
    record["meta"]["stored"] = f"book/data/gpu_programs/{f.name}"
    return record


def programs(jobs, timeout: float = 900, path=None, folder=None):
    """The Programs of ``jobs`` (a list, or a dict of name: job), read from the store.

    A job the store lacks is compiled here, in one child process, with a warning that
    names :data:`REFRESH`; a GPU job then needs the wheels (:func:`install`), else
    :class:`GpuTargetError`.  Returns the same shape: a list, or a dict."""
    names = list(jobs) if isinstance(jobs, dict) else None
    jobs = list(jobs.values()) if names is not None else list(jobs)
    answers = [stored(job, folder) for job in jobs]
    todo = [i for i, a in enumerate(answers) if a is None]
    path = Path(path) if path is not None else target_dir()
    gpu = [i for i in todo if normal_job(jobs[i])["target"] != "cpu"]
    if gpu and not wheels_installed(path):
        raise GpuTargetError(
            f"{len(gpu)} of {len(jobs)} GPU program(s) are not stored in "
            f"{folder or STORE_DIR} and the GPU-target wheels are not installed: "
            "run shardbook.gputarget.install() (in a checkout of the book: "
            "ci/install_gpu_target), then run the cell again")
    if todo:
        what = ", ".join(jobs[i]["builder"].split(":")[-1] for i in todo)
        warnings.warn(f"{len(todo)} GPU-target program(s) not stored ({what}): compiled"
                      f" here (`{REFRESH} --add JOBS.json` stores a new job)",
                      NotStoredWarning, stacklevel=2)
        fresh = Pending([jobs[i] for i in todo], timeout, path).result()
        for i, answer in zip(todo, fresh):
            answers[i] = answer
    progs = [_answer(a) for a in answers]
    return dict(zip(names, progs)) if names is not None else progs


def start_jobs(jobs: list[dict], timeout: float = 300, path=None) -> Pending:
    """Start compiling ``jobs`` in ONE child process and return at once; nothing is
    read from the store or written to it (:func:`programs` reads it).

    Each job: ``{"builder": "module:function", "kwargs": {...}, "target": "h200",
    "devices": 8, "hosts": 1}``; ``"target": "cpu"`` compiles for the child's first
    ``devices`` simulated CPU devices instead (XLA:CPU, whose ``cost_analysis()`` bytes
    go into ``meta["bytes_accessed"]``).  The child gets ``JAX_PLATFORMS=cpu`` and the
    wheels' folder on its ``PYTHONPATH``; nothing changes in this process.
    ``timeout`` bounds the whole child, counted from now.  Raises
    :class:`GpuTargetError` at once if a GPU job needs the wheels and they are not
    installed.
    """
    path = Path(path) if path is not None else target_dir()
    jobs = [normal_job(j) for j in jobs]
    if any(j["target"] != "cpu" for j in jobs) and not wheels_installed(path):
        raise GpuTargetError(f"the GPU-target wheels are not installed in {path}: run "
                             "ci/install_gpu_target (or shardbook.gputarget.install())")
    return Pending(jobs, timeout, path)


def compile_jobs(jobs: list[dict], timeout: float = 300, path=None) -> list:
    """:func:`start_jobs` and wait: one :class:`shardbook.hlo.Program` per job,
    compiled now."""
    return [_answer(a) for a in start_jobs(jobs, timeout, path).result()]


def _child() -> None:
    t0 = time.perf_counter()
    jobs = json.loads(sys.stdin.read())
    import jax

    jax.config.update(
        "jax_num_cpu_devices", int(os.environ.get("BOOK_GPU_TARGET_CPU_DEVICES", "8"))
    )
    results = []
    for job in jobs:
        key = (job.get("target", "h200"), job.get("devices", 8), job.get("hosts", 1))
        try:
            results.append(_run_job(job, Target(*key)))
        except Exception:
            results.append({"error": traceback.format_exc()[-4000:]})
    for r in results:
        r["child_s"] = time.perf_counter() - t0
    child.answer(results)   # one marked JSON line on stdout (shardbook.child)


def _main(argv: list[str]) -> int:
    if argv[:1] == ["child"]:
        _child()
        return 0
    if argv[:1] == ["install"]:
        install(Path(argv[1]) if len(argv) > 1 else None)
        return 0
    print("usage: python -m shardbook.gputarget install [DIR]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
