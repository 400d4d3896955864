"""One sharded model across several processes, with JAX's own multi-process runtime.

Chapter 5a runs chapter 3's model-parallel RNN in two processes of four simulated CPU
devices each, and checks the result against one process.  ``jax.distributed.initialize``
connects the processes; ``jax.devices()`` then lists all their devices, and CPU
collectives between them go through Gloo over TCP.  Every process runs the same program
(multi-controller JAX, as on a GPU cluster).  :func:`worker` is what each one runs (read
it top to bottom); :func:`launch` starts ``N`` here and returns their JSON reports.  By
hand, one terminal per ``--process-id`` (0, 1)::

    JAX_PLATFORMS=cpu python -m shardbook.multiprocess --process-id 0 \
        --num-processes 2 --port 12355

Nothing here imports JAX or BrainPy at import time: the device count and
``jax.distributed.initialize`` must come before either starts the XLA backend.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import time

from . import child, private
from .config import config

__all__ = ["LOOPBACK", "DEFAULTS", "COBA_DEFAULTS", "start_runtime", "shard_report",
           "worker", "rnn_part", "coba_part", "free_port", "child_env", "Launch",
           "start", "launch", "parse_args", "main"]

LOOPBACK = "127.0.0.1"

# The chapter-3 RNN, small enough that Gloo's TCP collectives at every step stay fast
# on a laptop: chapter 5a's sizes for 2 x 4 devices (start() uses its device count's).
DEFAULTS = config("ch5a", 8).asdict()
# Chapter 4's spiking network: 4,200 neurons at scale 1, divisible by any device count
# 1..8.  coba_steps=0 skips it (steps=0 skips the RNN).  coba_out_dir: where each
# process saves its gathered raster (bit-packed .npy).  coba_shift_process: a process
# that uses seed + 1 (a planted bug).
COBA_DEFAULTS = dict(coba_scale=1, coba_steps=0, coba_seed=0, coba_out_dir="",
                     coba_shift_process=-1)


# ---- What every process runs ---------------------------------------------------------
# region: multiprocess.start_runtime
def start_runtime(process_id: int, num_processes: int, port: int, local_devices: int,
                  timeout_s: int = 60) -> None:
    """Join the multi-process JAX runtime.  Must run before ``import brainpy``.

    Both steps fix things that JAX reads only once, when its backend starts:
    the number of (simulated) CPU devices of this process, and the list of processes.
    """
    import jax

    jax.config.update("jax_num_cpu_devices", local_devices)   # this process's devices
    jax.distributed.initialize(
        coordinator_address=f"{LOOPBACK}:{port}",       # where process 0 listens
        coordinator_bind_address=f"{LOOPBACK}:{port}",  # default: every interface
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=timeout_s,
    )
    # The CPU collectives between processes (Gloo over TCP) on 127.0.0.1 too: JAX 0.10.2
    # has no public option for it (shardbook/private.py).
    private.gloo_on_loopback(LOOPBACK)
    assert jax.local_device_count() == local_devices
    assert jax.device_count() == num_processes * local_devices
# endregion


def shard_report(x) -> dict:
    """Where the pieces of a global array are, as seen from *this* process."""
    from .shards import as_jax

    arr = as_jax(x)
    return dict(
        spec=str(arr.sharding.spec),
        global_shards=len(arr.global_shards),            # every device, every process
        addressable_shards=len(arr.addressable_shards),  # only this process's devices
        is_fully_addressable=arr.is_fully_addressable,
        is_fully_replicated=arr.is_fully_replicated,
        local=[dict(device=s.device.id, columns=_columns(s.index, arr.shape))
               for s in arr.addressable_shards],
    )


@contextlib.contextmanager
def _timed(seconds: dict, part: str):
    t = time.perf_counter()
    yield
    seconds[part] = time.perf_counter() - t


def _columns(index, shape) -> str:
    start, stop, _ = index[-1].indices(shape[-1])
    return f"{start}:{stop}"


# region: multiprocess.worker
def worker(process_id: int, num_processes: int, port: int, local_devices: int,
           **task) -> dict:
    """Join the runtime, run the RNN and/or COBA-HH parts; report from this process."""
    cfg = {**DEFAULTS, **COBA_DEFAULTS, **task}
    t0 = time.perf_counter()

    # 1. Join the runtime FIRST: importing brainpy would start the XLA backend.
    start_runtime(process_id, num_processes, port, local_devices)

    import jax

    report = dict(
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        local_devices=[d.id for d in jax.local_devices()],
        global_devices=[d.id for d in jax.devices()],
    )
    seconds = dict(runtime=time.perf_counter() - t0)   # wall time of each part
    if cfg["steps"]:
        with _timed(seconds, "rnn"):
            report.update(rnn_part(cfg, num_processes, local_devices))
    if cfg["coba_steps"]:
        with _timed(seconds, "coba"):
            report.update(coba_part(cfg))
    jax.distributed.shutdown()   # a barrier: nobody leaves while others still need it
    report["seconds"] = seconds
    return report
# endregion


# region: multiprocess.rnn_part
def rnn_part(cfg: dict, num_processes: int, local_devices: int) -> dict:
    """Train the chapter-3 RNN on a mesh that spans all processes."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    import brainpy.math as bm

    from .rnn.model import RNN, make_task, make_train_step
    from .shards import bytes_per_device

    # 2. The same code as on one machine.  jax.devices() now lists the devices of
    #    every process, so this 1-D 'hidden' mesh splits the hidden axis 8 ways.
    with bm.sharding.device_mesh(np.array(jax.devices()), ["hidden"]):
        model = RNN(cfg["num_in"], cfg["hidden"], cfg["num_out"], cfg["batch"],
                    seed=cfg["seed"])
    step = make_train_step(model, cfg["lr"])
    # Every process builds the same inputs (same seed): they are replicated.
    xs, ys = make_task(cfg["batch"], cfg["time"], cfg["num_in"], cfg["num_out"],
                       seed=cfg["seed"])
    # The loss is a replicated scalar: every device holds all of it (loss_shards).
    out = [step(xs, ys) for _ in range(cfg["steps"])]

    # 3. Reading a sharded result.  W_rec is split over 8 devices; 4 are elsewhere.
    wrec = model.wrec.value
    try:
        np.asarray(wrec)                          # needs every shard in this process
        fetch_error = None
    except RuntimeError as e:
        fetch_error = f"{type(e).__name__}: {e}"
    # An explicit gather: every process gets the whole array; every one must call it.
    wout_full = multihost_utils.process_allgather(model.wout.value, tiled=True)

    # 4. A hosts x devices mesh.  BrainPy maps one array axis to ONE mesh axis, so
    #    'hidden' splits 4 ways inside each process and 'host' replicates.
    local = np.array(jax.devices()).reshape(num_processes, local_devices)
    with bm.sharding.device_mesh(local, ["host", "hidden"]):
        model_2d = RNN(cfg["num_in"], cfg["hidden"], cfg["num_out"], cfg["batch"],
                       seed=cfg["seed"])
    wrec_2d = model_2d.wrec.value
    try:
        np.asarray(wrec_2d)  # works: this process holds every column (a full replica)
        fetch_error_2d = None
    except RuntimeError as e:
        fetch_error_2d = f"{type(e).__name__}: {e}"

    return dict(
        losses=[float(x) for x in out],   # float() works: the loss is replicated
        loss_shards=[float(s.data) for s in out[-1].addressable_shards],
        wrec=shard_report(wrec),
        fetch_error=fetch_error,
        wout_gathered=np.asarray(wout_full).tolist(),
        wrec_bytes_1d=bytes_per_device(wrec),
        wrec_2d=shard_report(wrec_2d),
        wrec_bytes_2d=bytes_per_device(wrec_2d),
        fetch_error_2d=fetch_error_2d,
        mesh_2d=dict(wrec_2d.sharding.mesh.shape),
    )
# endregion


# region: multiprocess.coba_part
def coba_part(cfg: dict) -> dict:
    """Run chapter 4's COBA-HH network on a 'neuron' mesh over every process's devices.

    Three ways for a process to read the results, from cheap to expensive:
    the population spike count per step (reduced inside the program: replicated),
    this process's own neurons (``addressable_shards``: no communication), and the
    whole ``[T, N]`` raster (``process_allgather``: every process receives all of it).
    With ``coba_out_dir`` it saves the gathered raster and membrane potentials there.
    """
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from . import coba

    seed = cfg["coba_seed"]
    if jax.process_index() == cfg["coba_shift_process"]:
        seed += 1          # a planted bug for the tests: this process draws others
    net = coba.build(jax.devices(), scale=cfg["coba_scale"], seed=seed)
    sim = coba.Simulation(net, record=("spike", "rate", "V"))
    out = sim.run(cfg["coba_steps"])

    report = {}
    for pop in ("E", "I"):
        raster, rate = out[f"{pop}.spike"], out[f"{pop}.rate"]
        # (a) the spike count per step: summed over all devices inside the program, so
        #     every device holds the whole [T] vector, and np.asarray works everywhere.
        counts = np.asarray(rate)
        # (b) this process's neurons: the shards it holds, no communication.
        mine = sorted(raster.addressable_shards, key=lambda s: s.index[1].start or 0)
        local = np.concatenate([np.asarray(s.data) for s in mine], axis=1)
        first = mine[0].index[1].start or 0
        # (c) the whole raster in every process: a collective over the network.
        whole = multihost_utils.process_allgather(raster, tiled=True)
        report[f"coba_{pop}"] = dict(
            shape=list(raster.shape),
            spec=str(raster.sharding.spec),
            is_fully_addressable=raster.is_fully_addressable,
            rate_fully_replicated=rate.is_fully_replicated,
            count_per_step_bytes=int(counts.nbytes),
            local_columns=[int(first), int(first + local.shape[1])],
            local_bytes=int(local.nbytes),
            local_spikes=int(local.sum()),
            gathered_bytes=int(whole.nbytes),
            total_spikes=int(counts.sum()),
        )
        if cfg["coba_out_dir"]:
            name = f"p{jax.process_index()}_{pop}.npy"
            path = os.path.join(cfg["coba_out_dir"], name)
            np.save(path, np.packbits(np.asarray(whole, dtype=bool), axis=-1))
            # the membrane potentials too, [T, N] float32, for the identity check
            v = multihost_utils.process_allgather(out[f"{pop}.V"], tiled=True)
            np.save(path.replace(".npy", "_V.npy"), np.asarray(v))
    return report
# endregion


# ---- Starting the processes (the notebook's job; on a cluster, srun's or mpirun's) ---
def free_port() -> int:
    """A TCP port on the loopback interface that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def child_env(extra: dict | None = None) -> dict:
    """A CPU-only worker's environment: :func:`shardbook.child.clean_env` keeping
    ``XLA_FLAGS`` (less a forced device count), with ``JAX_PLATFORMS=cpu`` and
    ``extra``."""
    return child.clean_env(dict(JAX_PLATFORMS="cpu", **(extra or {})),
                           keep=("XLA_FLAGS",))


class Launch:
    """Workers started by :func:`start`; :meth:`result` waits for their reports."""

    def __init__(self, procs: list, timeout_s: float):
        self.procs, self.deadline = procs, time.monotonic() + timeout_s
        self._reports = None

    def result(self) -> list[dict]:
        """The reports, sorted by process index.  A failed worker or the deadline kills
        every worker and raises :class:`shardbook.child.ChildError` (end of stderr)."""
        if self._reports is None:
            try:
                left = max(0.0, self.deadline - time.monotonic())
                reports = child.wait_all(self.procs, timeout=left)
            finally:
                for p in self.procs:
                    p.kill()
            self._reports = sorted(reports, key=lambda r: r["process_index"])
        return self._reports


def start(num_processes: int = 2, devices_per_process: int = 4, timeout_s: float = 240,
          target: str = "shardbook.multiprocess", **task) -> Launch:
    """Start ``num_processes`` CPU workers of ``devices_per_process`` simulated devices
    (``127.0.0.1``, one free port) and return at once; ``timeout_s`` counts from now.
    ``target``: the module or script each process runs, with :func:`main`'s options
    (the tests run one of their own)."""
    port = free_port()
    task = {**config("ch5a", num_processes * devices_per_process).asdict(), **task}
    args = ["--num-processes", num_processes, "--port", port,
            "--devices-per-process", devices_per_process, "--task", json.dumps(task)]
    procs = []
    try:
        for i in range(num_processes):
            procs.append(child.start(target, *args, "--process-id", i,
                                     env=child_env(), name=f"process {i}"))
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return Launch(procs, timeout_s)


def launch(num_processes: int = 2, devices_per_process: int = 4, timeout_s: float = 240,
           **task) -> list[dict]:
    """:func:`start` the workers and wait: their reports, sorted by process index."""
    return start(num_processes, devices_per_process, timeout_s, **task).result()


def parse_args(argv=None) -> argparse.Namespace:
    """A worker's options (:func:`start` passes them); ``task`` is parsed JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--process-id", type=int, required=True)
    p.add_argument("--num-processes", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--devices-per-process", type=int, default=4)
    p.add_argument("--task", default="{}", help="JSON object overriding DEFAULTS")
    a = p.parse_args(argv)
    a.task = json.loads(a.task)
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    report = worker(a.process_id, a.num_processes, a.port, a.devices_per_process,
                    **a.task)
    child.answer(report)   # one marked JSON line on stdout (shardbook.child)


if __name__ == "__main__":
    main()
