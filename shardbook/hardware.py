"""The GPU figures the book's time and cost models use, each with its source.

:data:`HARDWARE` (sources: :data:`SOURCES`) holds chapter 4's H200 figures: NVLink,
InfiniBand, NCCL's ring latencies, a kernel launch, a host round trip.  :data:`GPUS`
gives them per GPU (the H100 SXM's where they differ) with chapter 3's additions: peak
FLOP/s, L2, and the device memory as XLA reports it and as datasheets state it.  Cited,
not measured: a model on them says how a step scales, not what a GPU times.

This module imports neither JAX nor BrainPy.
"""
from __future__ import annotations

__all__ = ["GPUS", "HARDWARE", "JAX_MEM_FRACTION", "SOURCES",
           "allgather_latency", "budget_bytes", "gpu", "link_seconds",
           "ring_sent_bytes", "ring_traffic", "sent_per_call"]

HARDWARE = dict(
    hbm_bytes_per_s=4.8e12,       # H200 HBM3e
    nvlink_bytes_per_s=450e9,     # NVLink 4, per direction (900 GB/s both ways)
    net_bytes_per_s=50e9,         # one 400 Gb/s InfiniBand NDR adapter per GPU
    gpus_per_node=8,
    nccl_base_s=6.6e-6,           # NCCL ring, LL protocol: base latency
    nccl_nvlink_hop_s=0.6e-6,     # ... per intra-node step over NVLink
    nccl_net_hop_s=2.7e-6,        # ... per inter-node step over the network
    nccl_net_overhead_s=1.0e-6,   # ... floor of every step once the ring leaves a node
    launch_s=2e-6,                # one kernel launch on the GPU's stream
    host_sync_s=10e-6,            # device->host copy of a predicate and a wait
)
SOURCES = dict(
    hbm_bytes_per_s="NVIDIA H200 Tensor Core GPU datasheet: 4.8 TB/s HBM3e",
    nvlink_bytes_per_s="NVIDIA H200 datasheet: NVLink 900 GB/s (both directions)",
    net_bytes_per_s="NVIDIA DGX H200 datasheet: 8 x ConnectX-7, 400 Gb/s InfiniBand "
                    "each (one per GPU)",
    gpus_per_node="DGX/HGX H200: 8 GPUs on NVLink switches",
    nccl_base_s="NCCL src/graph/tuning.cc, baseLat[Ring][LL] = 6.6 us",
    nccl_nvlink_hop_s="NCCL src/graph/tuning.cc, hwLat[NVLINK][Ring][LL] = 0.6 us",
    nccl_net_hop_s="NCCL src/graph/tuning.cc, hwLat[NET][Ring][LL] = 2.7 us",
    nccl_net_overhead_s="NCCL src/graph/tuning.cc, getNetOverhead: 1 us (x86, Intel)",
    launch_s="NVIDIA Technical Blog, 'Getting Started with CUDA Graphs' (2019): launch "
             "overheads of microseconds per kernel; an order of magnitude, to be "
             "replaced by a measurement on the GPU",
    host_sync_s="XLA WhileThunk/ConditionalThunk::ExecuteOnStream (xla/backends/gpu/"
                "runtime/): Memcpy + BlockHostUntilDone per iteration; ~10 us is an "
                "order of magnitude (a PCIe round trip and a relaunch)",
)

# region: hardware.gpus
# Per GPU: HARDWARE's figures (the H100 SXM's where they differ), plus peak arithmetic,
# the L2 cache and the device memory.  Dense peaks: the datasheets' larger Tensor Core
# numbers are "with sparsity", twice the dense ones.
_H200_MORE = dict(
    fp32_flops=67e12,             # FP32 (no Tensor Cores)
    bf16_flops=989e12,            # BF16 Tensor Core, dense
    l2_bytes=52_428_800,          # 50 MiB
    memory_bytes=151_397_597_184,  # what the device reports: 141 GiB
    memory_datasheet_bytes=141e9,  # the datasheet's 141 GB
)
GPUS = {
    "h200": {**HARDWARE, **_H200_MORE},
    "h100_sxm": {**HARDWARE, **_H200_MORE,
                 "hbm_bytes_per_s": 3.35e12,           # HBM3
                 "memory_bytes": 84_942_979_072,       # 79.1 GiB
                 "memory_datasheet_bytes": 80e9},
}
# endregion


# JAX's default XLA_CLIENT_MEM_FRACTION (JAX docs, "GPU memory allocation"):
# XLA's GPU allocator "will use up to" total_memory * memory_fraction bytes
# (xla/pjrt/gpu/se_gpu_pjrt_client.cc), of the memory the device reports.
JAX_MEM_FRACTION = 0.75


def budget_bytes(name: str, fraction: float = JAX_MEM_FRACTION) -> float:
    """The bytes one JAX process may allocate on GPU ``name``: ``fraction`` of the
    memory the device reports (``memory_bytes``, XLA's device spec), the cap of XLA's
    allocator whether it preallocates or not.  The book's one budget."""
    return fraction * gpu(name)["memory_bytes"]


def gpu(name: str) -> dict:
    """The figures of GPU ``name``: ``'h200'`` or ``'h100_sxm'`` (also ``'H100'``,
    ``'h100-sxm'``...); ``KeyError`` for another."""
    key = name.lower().replace("-", "_").replace(" ", "_")
    key = {"h100": "h100_sxm"}.get(key, key)
    if key not in GPUS:
        raise KeyError(f"no figures for GPU {name!r}; known: {', '.join(GPUS)}")
    return GPUS[key]


def allgather_latency(n: int, hw: dict = HARDWARE) -> float:
    """NCCL's ring model of an all-gather's latency over ``n`` GPUs (tuning.cc):
    base + (steps inside nodes) x intra-node hop + (steps between nodes) x network
    hop."""
    if n <= 1:
        return 0.0
    nodes = -(-n // hw["gpus_per_node"])
    steps, inter = n - 1, nodes - 1
    intra = hw["nccl_nvlink_hop_s"]
    if nodes > 1:
        intra = max(intra, hw["nccl_net_overhead_s"])
    return hw["nccl_base_s"] + (steps - inter) * intra + inter * hw["nccl_net_hop_s"]


def link_seconds(gathered_bytes: float, n: int, hw: dict = HARDWARE) -> float:
    """Seconds to receive the ``(n - 1) / n`` of an all-gather's result that other
    devices hold: the part from the same node over NVLink, the rest over the network."""
    if n <= 1:
        return 0.0
    g = hw["gpus_per_node"]
    same_node = (min(n, g) - 1) / n * gathered_bytes
    other_nodes = max(n - g, 0) / n * gathered_bytes
    return same_node / hw["nvlink_bytes_per_s"] + other_nodes / hw["net_bytes_per_s"]


# region: hardware.ring
def ring_sent_bytes(op: str, result_bytes: float, k: int) -> float:
    """Bytes one device sends for one collective on a ring of ``k`` devices, from the
    size of its result on one device (Patarasuk and Yuan, 2009; NCCL's ring
    algorithms): an all-gather passes on the k - 1 blocks it does not own, an
    all-reduce is a reduce-scatter then an all-gather, a reduce-scatter's result is
    1/k of what it reduces, and a collective permute sends its whole result once."""
    if k <= 1:
        return 0.0
    if op == "all-gather":
        return (k - 1) / k * result_bytes
    if op == "all-reduce":
        return 2 * (k - 1) / k * result_bytes
    if op == "reduce-scatter":
        return (k - 1) * result_bytes
    if op == "collective-permute":
        return result_bytes
    raise ValueError(f"no ring model for {op!r}")
# endregion


def sent_per_call(program, trips: int | None = None) -> float:
    """Bytes one device sends per call of a ``shardbook.hlo.Program``: each collective
    on a ring of its replica group (``Collective.group``), times the trips of the loops
    around it (``trips`` for each, else each loop's known count).  Raises ``ValueError``
    for a collective whose group could not be read, rather than guess every device."""
    total = 0.0
    for c in program.collectives:
        if c.group is None and c.op != "collective-permute":
            raise ValueError(f"{c.op} in {c.computation}: its replica groups are in a "
                             "form shardbook.hlo does not read")
        total += (ring_sent_bytes(c.op, c.nbytes, c.group or 2)
                  * program.trips_of(c, trips))
    return total


def ring_traffic(collectives, k: int) -> dict:
    """Bytes one device sends, by phase (``"fwd"`` and ``"bwd"``: per time step;
    ``"once"``: per call), for collectives with ``op``, ``phase`` and ``nbytes``
    (``shardbook.hlo.Collective``), on a ring of ``k`` devices."""
    out = {"fwd": 0.0, "bwd": 0.0, "once": 0.0}
    for c in collectives:
        out[c.phase] += ring_sent_bytes(c.op, c.nbytes, k)
    return out
