"""The tests' own multi-process worker: chapter 4's networks across processes.

Chapter 5a's worker (``shardbook.multiprocess``) runs the RNN and one small network,
and the page shows it.  These tests also need every graph of chapter 4, a checkpoint
written by two processes, and a planted seed shift; that part lives here, not in the
worker the page shows.  :func:`start` runs the page's worker with it, in one launch,
with the page worker's options and ``coba_nets``::

    [{"name": "rows", "build": {"scale": 0.2, "graph": "rows", "conn": "event"},
      "skip": 500, "window": 100, "after": 50, "checkpoint": True}]
"""
from __future__ import annotations

import os
from pathlib import Path

SCRIPT = str(Path(__file__).resolve())


def skip_chunks(spec: dict) -> int:
    """How many ``window``-step runs make the ``skip`` steps of a ``coba_nets`` entry.

    Skipped steps run the window's own program (records dropped), so each network
    compiles one step program, not two.  Raises ``ValueError`` unless ``window >= 1``
    and ``skip`` is a multiple of it."""
    skip, window = spec.get("skip", 0), spec.get("window", 0)
    if window < 1:
        raise ValueError(f"coba_nets entry {spec.get('name')!r}: window={window}; "
                         "record at least one step")
    if skip % window:
        raise ValueError(f"coba_nets entry {spec.get('name')!r}: skip={skip} is not a "
                         f"multiple of window={window}; make it one")
    return skip // window


def start(nets: list[dict], **kwargs):
    """``multiprocess.start`` of this worker; a bad entry of ``nets`` raises
    ``ValueError`` before any process starts."""
    from shardbook import multiprocess as mp

    for spec in nets:
        skip_chunks(spec)
    return mp.start(target=SCRIPT, coba_nets=nets, **kwargs)


def coba_networks_part(cfg: dict) -> dict:
    """Chapter 4's networks, any graph, delivery and start, across every process.

    For each entry of ``cfg["coba_nets"]``: build it on all devices (each process makes
    only its devices' part of the graph), run ``skip`` steps (:func:`skip_chunks`), then
    ``window`` steps whose spikes and V every process gathers and saves in ``out_dir``
    as ``<name>_p<process>_{spike,V}.npy``.  With ``checkpoint``: an Orbax checkpoint
    in ``<out_dir>/<name>_ckpt``, then ``after`` steps more, saved as
    ``<name>_after_p<process>_*.npy``.  With ``shift_process``, that process builds
    from seed + 1 (a planted bug).  Returns each name's fingerprint, in-degrees,
    devices and ``t``.
    """
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from shardbook import coba
    from shardbook.coba import checkpoint, connectivity

    out_dir, me = cfg["coba_out_dir"], jax.process_index()
    reports = {}

    def save(prefix, out, net):
        for var in ("spike", "V"):
            whole = np.concatenate([np.asarray(multihost_utils.process_allgather(
                out[f"{p}.{var}"], tiled=True)) for p in net.populations], axis=1)
            np.save(os.path.join(out_dir, f"{prefix}_p{me}_{var}.npy"), whole)

    for spec in cfg["coba_nets"]:
        name, build = spec["name"], dict(spec["build"])
        if me == spec.get("shift_process", -1):
            build["seed"] = build.get("seed", 0) + 1
        net = coba.build(jax.devices(), **build)
        sim = coba.Simulation(net, record=("spike", "V"))
        for _ in range(skip_chunks(spec)):
            sim.run(spec["window"])
        save(name, sim.run(spec["window"]), net)
        reports[name] = dict(
            fingerprint=connectivity.fingerprint(net),
            in_degree={k: dict(v) for k, v in connectivity.in_degree(net).items()},
            devices=net.devices, t=sim.t)
        if spec.get("checkpoint"):
            path = os.path.join(out_dir, f"{name}_ckpt")
            reports[name]["checkpoint_step"] = checkpoint.save(path, sim)
            save(f"{name}_after", sim.run(spec["after"]), net)
    return reports


def main(argv=None) -> None:
    """One process: the page's worker (``shardbook.multiprocess.worker``), with the
    networks run just before it leaves the runtime.  ``jax.distributed.shutdown`` is
    wrapped for that, so that one launch serves every test and the worker the page
    shows carries no test-only branch."""
    import jax

    from shardbook import child, multiprocess as mp

    a = mp.parse_args(argv)
    task = dict(a.task)
    nets = task.pop("coba_nets")
    done, leave = {}, jax.distributed.shutdown

    def shutdown():
        done["coba_nets"] = coba_networks_part({**task, "coba_nets": nets})
        leave()

    jax.distributed.shutdown = shutdown
    report = mp.worker(a.process_id, a.num_processes, a.port, a.devices_per_process,
                       **task)
    child.answer({**report, **done})


if __name__ == "__main__":
    main()
