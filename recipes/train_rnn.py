#!/usr/bin/env python
"""Train the book's model-parallel RNN on every GPU of a cluster (chapter 5a).

Start ONE copy of this script per GPU, with a cluster launcher:

    sbatch recipes/slurm_gpu.sbatch          # SLURM: srun starts the copies
    recipes/mpirun_gpu.sh hosts.txt 4        # Open MPI: mpirun starts the copies

Every copy runs the same program on its own GPU ("multi-controller" JAX).  The copies
find each other through ``jax.distributed.initialize()``, which reads the launcher's
environment (JAX 0.10.2, ``jax/_src/clusters/``):

* SLURM (``srun``): SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID,
  SLURM_LOCALID.  Coordinator: the first node of the step, port
  ``61440 + SLURM_JOB_ID % 4096`` unless JAX_COORDINATOR_PORT is set.
* Open MPI 4 (``mpirun``): OMPI_MCA_orte_hnp_uri (the coordinator's IP),
  OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK.
* Open MPI 5 sets no OMPI_MCA_orte_hnp_uri, so JAX 0.10.2 does not detect it;
  :func:`initialize_kwargs` then passes the same values explicitly, with the
  coordinator from JAX_COORDINATOR_ADDRESS (mpirun_gpu.sh exports it).

On GPUs both detections give each process ONE GPU: ``local_device_ids=[local rank]``.
So start as many processes per node as it has GPUs, and let every process see all of
them (do not give each task its own CUDA_VISIBLE_DEVICES).

Needs the book's packages on every node, at the book's own version (its tag):
    URL=git+https://github.com/sharding-brain-dynamics/book@main
    pip install "shardbook[hosted,cuda12] @ $URL"

Try it without a cluster, on CPU, by faking what srun sets (two terminals, i = 0, 1):
    JAX_PLATFORMS=cpu JAX_NUM_CPU_DEVICES=2 SLURM_JOB_ID=1 \\
    SLURM_STEP_NODELIST=127.0.0.1 SLURM_NTASKS=2 SLURM_PROCID=$i SLURM_LOCALID=$i \\
    python recipes/train_rnn.py --hidden 840
"""
from __future__ import annotations

import argparse
import os


def initialize_kwargs(environ=os.environ) -> dict:
    """Arguments for ``jax.distributed.initialize``: none where JAX detects the
    launcher."""
    if "OMPI_COMM_WORLD_SIZE" in environ and "OMPI_MCA_orte_hnp_uri" not in environ:
        # Open MPI 5 (PRRTE): pass what JAX's Open MPI 4 detection would have read.
        return dict(
            coordinator_address=environ["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(environ["OMPI_COMM_WORLD_SIZE"]),
            process_id=int(environ["OMPI_COMM_WORLD_RANK"]),
            local_device_ids=[int(environ["OMPI_COMM_WORLD_LOCAL_RANK"])],
        )
    return {}  # SLURM (srun) or Open MPI 4 (mpirun): detected from the environment


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", type=int, default=8 * 840,
                   help="hidden units (divisible by the GPU count)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--time", type=int, default=100, help="time steps per sequence")
    p.add_argument("--steps", type=int, default=100, help="training steps")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--checkpoint-dir", default=None,
                   help="an absolute path on a shared file system")
    a = p.parse_args()

    # 1. Join the other processes BEFORE importing brainpy: importing it starts JAX's
    #    backend, and jax.distributed.initialize() then raises a RuntimeError.
    import jax

    jax.distributed.initialize(**initialize_kwargs())

    # 2. Now the book's code, unchanged: jax.devices() lists the GPUs of every process.
    import numpy as np

    import brainpy.math as bm

    from shardbook.rnn import RNN, make_task, make_train_step

    lead = jax.process_index() == 0
    if lead:
        print(f"{jax.process_count()} processes, {jax.device_count()} devices "
              f"({jax.local_device_count()} per process, {jax.devices()[0].platform})",
              flush=True)
    # One 'hidden' axis over every device.  Each time step all-gathers the hidden
    # state, across nodes too; with fast links inside a node, a ('batch', 'hidden')
    # mesh of shape (nodes, GPUs per node) keeps those collectives inside the node.
    with bm.sharding.device_mesh(np.array(jax.devices()), ["hidden"]):
        model = RNN(8, a.hidden, 8, a.batch, seed=0)
    step = make_train_step(model, a.lr)
    xs, ys = make_task(a.batch, a.time, 8, 8, seed=0)  # the same on every process
    for i in range(a.steps):
        loss = float(step(xs, ys))   # a replicated scalar: every process can read it
        if lead and (i % 10 == 0 or i == a.steps - 1):
            print(f"step {i + 1:4d}  loss {loss:.6f}", flush=True)

    # 3. Checkpoint: every process calls save and writes its own shards; the directory
    #    must be on a file system that all nodes share.
    if a.checkpoint_dir:
        import orbax.checkpoint as ocp

        weights = model.train_vars(method="relative").unique()
        state = {"weights": {k: v.value for k, v in weights.items()}}
        with ocp.CheckpointManager(a.checkpoint_dir) as mngr:
            mngr.save(a.steps, args=ocp.args.StandardSave(state))
            mngr.wait_until_finished()
        if lead:
            print(f"saved step {a.steps}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
