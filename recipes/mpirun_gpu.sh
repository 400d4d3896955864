#!/bin/bash
# Train the book's model-parallel RNN on several GPU nodes with Open MPI's mpirun (chapter 5a).
#
#   recipes/mpirun_gpu.sh HOSTFILE [GPUS_PER_NODE] [entry point options...]
#   recipes/mpirun_gpu.sh hosts.txt 4 --steps 200
#   ENTRY=recipes/run_coba.py recipes/mpirun_gpu.sh hosts.txt 4 --scale 1000   # COBA-HH
#
# HOSTFILE lists one node per line (Open MPI format, e.g. "gpu017 slots=4").  Run it
# from the repository root, on the first node of HOSTFILE, with the book's packages
# installed on every node at the same path.
#
# How JAX finds the other processes: mpirun starts GPUS_PER_NODE processes per node and
# sets OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_LOCAL_RANK.
# Open MPI 4 also sets OMPI_MCA_orte_hnp_uri, from which JAX 0.10.2 detects the rank
# and count (jax/_src/clusters/ompi_cluster.py); process i on a node drives GPU number
# OMPI_COMM_WORLD_LOCAL_RANK.  Open MPI 5 no longer sets OMPI_MCA_orte_hnp_uri, and JAX
# 0.10.2 does not detect it (jax-ml/jax#14576), so train_rnn.py passes the values itself.
# This script exports JAX_COORDINATOR_ADDRESS, which jax.distributed.initialize() reads
# before any detection: under Open MPI 4 and 5 alike the coordinator is FIRST_NODE:61234.
# Every process must see all the GPUs of its node: do not set CUDA_VISIBLE_DEVICES per rank.
set -euo pipefail

HOSTFILE="${1:?usage: recipes/mpirun_gpu.sh HOSTFILE [GPUS_PER_NODE] [options...]}"
ENTRY="${ENTRY:-recipes/train_rnn.py}"   # or recipes/run_coba.py: chapter 4's network
GPUS_PER_NODE="${2:-4}"
shift $(( $# >= 2 ? 2 : 1 ))

NODES=$(grep -cvE '^[[:space:]]*(#|$)' "$HOSTFILE")
FIRST_NODE=$(grep -vE '^[[:space:]]*(#|$)' "$HOSTFILE" | head -n 1 | awk '{print $1}')
export JAX_COORDINATOR_ADDRESS="${JAX_COORDINATOR_ADDRESS:-$FIRST_NODE:61234}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY

echo "mpirun: $NODES nodes x $GPUS_PER_NODE GPUs, coordinator $JAX_COORDINATOR_ADDRESS"
mpirun -np $(( NODES * GPUS_PER_NODE )) --hostfile "$HOSTFILE" \
    --map-by "ppr:${GPUS_PER_NODE}:node" --bind-to none \
    -x JAX_COORDINATOR_ADDRESS -x XLA_PYTHON_CLIENT_PREALLOCATE -x PATH -x LD_LIBRARY_PATH \
    python "$ENTRY" "$@"
