#!/usr/bin/env python
"""Simulate the book's COBA-HH network on every device of every process (chapter 5a).

Start ONE copy of this script per GPU (or per CPU process), with a launcher:

    sbatch --export=ALL,MODEL=coba recipes/slurm_gpu.sbatch   # SLURM: srun starts them
    ENTRY=recipes/run_coba.py recipes/mpirun_gpu.sh hosts.txt 4 --scale 1000
    recipes/mpirun_cpu_loopback.sh                   # CI: 2 MPICH ranks on 127.0.0.1

Every copy runs the same program ("multi-controller" JAX) on a 1-D 'neuron' mesh over
jax.devices(), which lists the devices of all processes.  The network and its random
connectivity come from shardbook.coba (chapter 4); each process generates only the
columns its devices own.  Each step all-gathers the spikes across processes.

How the copies find each other (JAX 0.10.2, ``jax/_src/clusters/``):

* SLURM (``srun``) and Open MPI 4 (``mpirun``): ``jax.distributed.initialize()``
  detects them by itself.
* Open MPI 5 sets OMPI_COMM_WORLD_SIZE/RANK but no OMPI_MCA_orte_hnp_uri, and MPICH
  (hydra or gforker) sets PMI_SIZE/PMI_RANK: JAX 0.10.2 detects neither.
  :func:`initialize_kwargs` then passes the values itself, with the coordinator from
  JAX_COORDINATOR_ADDRESS (the launch scripts export it).
* JAX's opt-in mpi4py detector would also work with any MPI, but it takes the
  coordinator from ``socket.gethostname()`` and lets it listen on every interface;
  the explicit address is what keeps a one-machine run on 127.0.0.1.

What comes out: process 0 prints the spike count of each population.  Each step
records only a counter per neuron, on the device that owns it: the step's only
collectives are the all-gathers of the spikes (chapter 4 warns that a population rate
summed inside the step adds an all-reduce per step, and across nodes a second,
latency-bound collective).  The totals are one reduction after the run.  With
``--raster-dir DIR``, every process also writes the spike raster of ITS OWN neurons
(``addressable_shards``: no communication) as ``DIR/raster_p<process>_<pop>.npz``, with
the first neuron's index; nothing is gathered.  ``--graph``, ``--conn`` and
``--start`` choose any network of chapter 4 (e.g. ``--graph rows --conn push``, the
million-neuron path).

Needs the book's packages on every node, at the book's own version (its tag):
    URL=git+https://github.com/sharding-brain-dynamics/book@main
    pip install "shardbook[hosted,cuda12] @ $URL"
"""
from __future__ import annotations

import argparse
import os


def initialize_kwargs(environ=os.environ) -> dict:
    """Arguments for ``jax.distributed.initialize``: none where JAX detects the
    launcher."""
    out = {}
    if "OMPI_COMM_WORLD_SIZE" in environ and "OMPI_MCA_orte_hnp_uri" not in environ:
        # Open MPI 5 (PRRTE): what JAX's Open MPI 4 detection would have read.
        out = dict(num_processes=int(environ["OMPI_COMM_WORLD_SIZE"]),
                   process_id=int(environ["OMPI_COMM_WORLD_RANK"]),
                   local_device_ids=[int(environ["OMPI_COMM_WORLD_LOCAL_RANK"])])
    elif "PMI_SIZE" in environ and "PMI_RANK" in environ:
        # MPICH's launchers (hydra's mpiexec, mpiexec.gforker): PMI variables.
        out = dict(num_processes=int(environ["PMI_SIZE"]),
                   process_id=int(environ["PMI_RANK"]))
        if "MPI_LOCALRANKID" in environ:
            out["local_device_ids"] = [int(environ["MPI_LOCALRANKID"])]
    if out:
        out["coordinator_address"] = environ["JAX_COORDINATOR_ADDRESS"]
    if "JAX_COORDINATOR_BIND_ADDRESS" in environ:
        out["coordinator_bind_address"] = environ["JAX_COORDINATOR_BIND_ADDRESS"]
    return out  # {} : SLURM (srun) or Open MPI 4, detected from the environment


def make_simulation(devices, scale=1., seed=0, graph="fixed", conn="push",
                    start="rest", raster=False):
    """The recipe's network on ``devices`` and its simulation: counters per neuron (and
    the raster, with ``raster``), nothing reduced inside the step."""
    from shardbook import coba

    net = coba.build(devices, scale=scale, seed=seed, graph=graph, conn=conn,
                     start=start)
    record = ("count", "spike") if raster else ("count",)
    return coba.Simulation(net, record=record)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1,
                   help="network size: 3,360 E + 840 I neurons per unit")
    p.add_argument("--steps", type=int, default=1000, help="time steps of 0.1 ms")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--graph", default="fixed",
                   help="fixed, bernoulli or rows (rows needs --conn push or event)")
    p.add_argument("--conn", default="push",
                   help="the delivery: push (COBAHH's default, chapter 4's fastest), "
                        "event or index")
    p.add_argument("--start", default="rest", help="rest, random or kick")
    p.add_argument("--raster-dir", default=None,
                   help="write each process's own spike raster here "
                        "(a shared file system)")
    a = p.parse_args(argv)

    # 1. Join the other processes BEFORE importing brainpy: importing it starts JAX's
    #    backend, and jax.distributed.initialize() then raises a RuntimeError.
    import jax

    jax.distributed.initialize(**initialize_kwargs())
    if os.environ.get("BOOK_GLOO_LOOPBACK"):
        # CPU runs on one machine: keep the Gloo collectives on 127.0.0.1 as well
        # (no public JAX option; see shardbook/private.py).
        from shardbook import private

        private.gloo_on_loopback("127.0.0.1")

    # 2. Now the book's code, unchanged.
    import numpy as np

    lead = jax.process_index() == 0
    if lead:
        print(f"{jax.process_count()} processes, {jax.device_count()} devices "
              f"({jax.local_device_count()} per process, {jax.devices()[0].platform})",
              flush=True)
    sim = make_simulation(jax.devices(), a.scale, a.seed, a.graph, a.conn, a.start,
                          raster=bool(a.raster_dir))
    out = sim.run(a.steps)
    totals = sim.totals()            # one reduction after the run: replicated, readable
    for pop in ("E", "I"):
        if lead:
            print(f"{pop}: {totals[pop]} spikes in {a.steps} steps", flush=True)
        if a.raster_dir:
            raster = out[f"{pop}.spike"]
            mine = sorted(raster.addressable_shards,
                          key=lambda s: s.index[1].start or 0)
            local = np.concatenate([np.asarray(s.data) for s in mine], axis=1)
            name = f"raster_p{jax.process_index()}_{pop}.npz"
            path = os.path.join(a.raster_dir, name)
            np.savez(path, raster=local, first=mine[0].index[1].start or 0)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
