"""The network's memory, predicted and measured (from shards and XLA).

:func:`model_bytes` is the general ledger (in-degree, per-synapse weights, delays);
:func:`predict` is chapter 4's network as built.
"""
from __future__ import annotations

import jax.numpy as jnp

import brainpy.math as bm

from .events import rows_capacity
from .network import COBAHH
from .parameters import K_EXC, K_INH
from .push import SPIKE_CAPACITY, gathered_ids

__all__ = [
    "STATE_BYTES_PER_NEURON", "SPIKE_BYTES_PER_NEURON", "INDEX_BYTES_PER_SYNAPSE",
    "SYNAPSES_PER_NEURON", "PUSH_COUNTER_BYTES", "conn_bytes_total", "event_bytes",
    "TEMPORARIES", "GPU_BYTES_PER_EVENT_SLOT", "gathered_bytes",
    "TEMPORARY_SLACK_BYTES", "TEMPORARY_SLACK_FRACTION", "predict", "peak_tolerance",
    "fit_bytes_per_device", "net_arrays", "measured_bytes", "compiled_stats",
    "model_bytes"
]

STATE_BYTES_PER_NEURON = 4 * 4 + 2 * 4   # float32 V, m, h, n, g_e, g_i
SPIKE_BYTES_PER_NEURON = 1               # last step's spikes (bool): the 1-step delay
INDEX_BYTES_PER_SYNAPSE = 4              # an int32 source index per synapse
SYNAPSES_PER_NEURON = K_EXC + K_INH      # 80 inputs per neuron at every scale
# push counters per device: int32 (dropped, largest), 2 spike buffers + 4 projections
PUSH_COUNTER_BYTES = 2 * 4 * (2 + 4)


def conn_bytes_total(n_exc: int, n_inh: int, kind: str = "index") -> int:
    """Bytes of the whole network's connectivity as ``kind``, all devices together;
    ``ValueError`` for ``"event"`` (see :func:`event_bytes`) or an unknown kind."""
    n = n_exc + n_inh
    if kind == "index":
        return INDEX_BYTES_PER_SYNAPSE * SYNAPSES_PER_NEURON * n
    if kind == "mask":
        return n * n  # one uint8 per (pre, post) pair
    # int32 post index per synapse + int32 row pointers (n_pre + 1 per projection)
    if kind == "csr":
        return 4 * SYNAPSES_PER_NEURON * n + 4 * (2 * (n_exc + 1) + 2 * (n_inh + 1))
    if kind == "jit":
        return 0
    if kind == "event":
        raise ValueError(
            "event connectivity depends on the device count: use event_bytes"
        )
    raise ValueError(kind)


def event_bytes(n_exc: int, n_inh: int, devices: int, graph: str = "fixed",
                k=(K_EXC, K_INH)) -> dict:
    """Bytes of :class:`EventCSR` connectivity per device: ``indices`` (an int32 per
    local synapse, or per slot of the padded :func:`rows_capacity` for ``"rows"``:
    shrinks) and ``indptr`` (n_pre + 1 int32 per projection on *every* device: does
    not).  ``graph``: ``"fixed"`` or ``"rows"``, else ``ValueError``."""
    k_exc, k_inh = k
    plan = ((k_exc, n_exc, n_exc), (k_exc, n_exc, n_inh), (k_inh, n_inh, n_exc),
            (k_inh, n_inh, n_inh))
    indptr = sum(4 * (n_pre + 1) for _, n_pre, _ in plan)
    if graph == "rows":
        indices = sum(
            4 * rows_capacity(kk, n_post // devices) for kk, _, n_post in plan
        )
    elif graph == "fixed":
        indices = sum(4 * kk * n_post // devices for kk, _, n_post in plan)
    else:
        raise ValueError(f"no prediction for graph {graph!r}")
    return dict(indices=indices, indptr=indptr, total=indices + indptr)


# The step's temporaries per device: (copies of the connectivity, B per local neuron,
# B per network neuron).  XLA:CPU 0.10.2 (chapter 4's loops): the index matrix is copied
# twice into the loop state; 16-20 B per neuron hold new values while old ones are read
# (push's 19 fitted on 1,008,000 neurons on 8 devices); the event CSR's pass over every
# source keeps 28 B per network neuron.  XLA:GPU (H200 target, 840,000 neurons on 8):
# about 12 B per neuron, no index copy; the event CSR's pass 16 B per network neuron.
TEMPORARIES = {
    "cpu": {"index": (2, 16, 0), "mask": (2, 16, 0), "push": (0, 19, 0),
            "event": (0, 20, 28), "brainevent": (0, 20, 0)},
    "gpu": {"index": (0, 12, 0), "push": (0, 12, 0), "event": (0, 12, 16)},
}
GPU_BYTES_PER_EVENT_SLOT = 13  # push's XLA path on a GPU, per event slot


def gathered_bytes(n_exc: int, n_inh: int, devices: int,
                   fraction: float = SPIKE_CAPACITY) -> int:
    """Bytes of the push delivery's gathered index buffers on every device
    (:func:`shardbook.coba.push.gathered_ids`): a temporary on any compiler that does
    not shrink with more devices (0.11 MiB at 1,008,000 neurons on 8 devices)."""
    return 4 * sum(gathered_ids(n_exc, n_inh, devices, fraction).values())
# Tolerance: XLA's packing of small buffers (0.2-1.9 KiB at 4,200 neurons, 0.4 % at
# 10^6) plus a share of the temporaries; below the temporaries wherever the ledger is
# shown, so a model without them fails (tests/test_coba.py).
TEMPORARY_SLACK_BYTES = 4096
TEMPORARY_SLACK_FRACTION = 0.1


def predict(
    n_exc: int,
    n_inh: int,
    devices: int,
    kind: str = "index",
    record_bytes_per_neuron: float = 0,
    graph: str = "fixed",
    counters: bool = False,
    platform: str = "cpu",
    event_slots: int = 0,
    spike_capacity: float = SPIKE_CAPACITY,
) -> dict:
    """Predicted bytes on the fullest device, by category.

    ``record_bytes_per_neuron``: records per neuron (outputs); ``counters``: an int32
    spike counter per neuron.  ``"csr"`` is whole on every device, ``"jit"`` holds
    nothing, the rest split.  ``temporaries``: :data:`TEMPORARIES` of ``platform``
    (``"cpu"`` or ``"gpu"``, else ``ValueError``), plus :data:`GPU_BYTES_PER_EVENT_SLOT`
    per ``event_slots`` on a GPU, plus push's :func:`gathered_bytes`.  ``peak``
    (arguments + outputs + temporaries; inputs are not donated) matches
    :func:`compiled_stats`'s within :func:`peak_tolerance`.

    Long because: one line per category of bytes, so it reads as chapter 4's table.
    """
    if platform not in TEMPORARIES:
        raise ValueError(
            f"platform must be one of {tuple(TEMPORARIES)}, not {platform!r}"
        )
    n = n_exc + n_inh
    per = n / devices
    csr = kind in ("event", "push", "brainevent")  # EventCSR's per-device CSR
    if csr:
        conn = event_bytes(n_exc, n_inh, devices, graph)["total"]
    else:
        conn = conn_bytes_total(n_exc, n_inh, kind)
    if kind in ("index", "mask"):
        conn /= devices
    out = dict(state=STATE_BYTES_PER_NEURON * per, delays=SPIKE_BYTES_PER_NEURON * per,
               connectivity=conn, counters=PUSH_COUNTER_BYTES if kind == "push" else 0)
    held = conn if kind in ("index", "mask") or csr else 0
    out["arguments"] = (out["state"] + out["delays"] + held + 4 * counters * per
                        + out["counters"])
    out["outputs"] = (STATE_BYTES_PER_NEURON + SPIKE_BYTES_PER_NEURON + 4 * counters
                      + record_bytes_per_neuron) * per + out["counters"]
    copies, per_neuron, per_network_neuron = TEMPORARIES[platform].get(kind, (0, 0, 0))
    out["gathered"] = (gathered_bytes(n_exc, n_inh, devices, spike_capacity)
                       if kind == "push" else 0)
    out["temporaries"] = (
        out["gathered"]
        + copies * held
        + per_neuron * per
        + per_network_neuron * n
        + GPU_BYTES_PER_EVENT_SLOT * event_slots * (platform == "gpu")
    )
    out["peak"] = out["arguments"] + out["outputs"] + out["temporaries"]
    if kind == "csr":
        out["peak"] += conn
    return {k: int(round(v)) for k, v in out.items()}


def peak_tolerance(temporaries: float) -> float:
    """Allowed bytes between a compiled and a predicted peak of ``temporaries`` bytes:
    :data:`TEMPORARY_SLACK_BYTES` plus :data:`TEMPORARY_SLACK_FRACTION` of them."""
    return TEMPORARY_SLACK_BYTES + TEMPORARY_SLACK_FRACTION * temporaries


def fit_bytes_per_device(
    n: int, devices: int, record_bytes_per_neuron: float = 8
) -> float:
    """Predicted peak bytes per device for ``n`` neurons (index representation,
    XLA:GPU), for sizing GPUs: :func:`predict`'s peak plus the gathered spikes, a byte
    per network neuron.  The default record: an int32 counter read and written (8 B)."""
    n_exc = round(0.8 * n)
    return (predict(n_exc, n - n_exc, devices, "index", record_bytes_per_neuron,
                    platform="gpu")["peak"] + n * SPIKE_BYTES_PER_NEURON)


def _leaf(x):
    return x.value if isinstance(x, bm.Variable) else x


def net_arrays(net: COBAHH) -> dict:
    """Every array of the network by stable name (``"E.V"``, ``"E2I.conn"``) with its
    category: state, delays (last spikes), connectivity or counters (push's)."""
    out = {}
    for name, x in net.exchanges.items():
        out[f"{name}.exchange"] = ("counters", _leaf(x.counter))
    for name, pop in net.populations.items():
        for var in ("V", "m", "h", "n"):
            out[f"{name}.{var}"] = ("state", _leaf(getattr(pop, var)))
        out[f"{name}.spike"] = ("delays", _leaf(pop.spike))
    for name, proj in net.projections.items():
        post = name[-1]
        # E2I.syn.g is I.g_e
        out[f"{post}.g_{name[0].lower()}"] = ("state", _leaf(proj.syn.g))
        comm = proj.comm
        if hasattr(comm, "conn"):
            out[f"{name}.conn"] = ("connectivity", _leaf(comm.conn))
        elif comm.kind in ("event", "push", "brainevent"):
            out[f"{name}.indptr"] = ("connectivity", _leaf(comm.op.indptr))
            out[f"{name}.indices"] = ("connectivity", _leaf(comm.op.indices))
            if comm.kind == "push":
                out[f"{name}.counter"] = ("counters", _leaf(comm.op.counter))
        elif comm.kind == "csr":
            out[f"{name}.indices"] = ("connectivity", jnp.asarray(comm.op.indices))
            out[f"{name}.indptr"] = ("connectivity", jnp.asarray(comm.op.indptr))
    return out


def measured_bytes(net: COBAHH) -> dict:
    """Bytes on the fullest device, by category, read from the arrays' shards."""
    from ..shards import bytes_per_device

    out = {}
    for cat in ("state", "delays", "connectivity", "counters"):
        arrays = [a for c, a in net_arrays(net).values() if c == cat]
        out[cat] = max(bytes_per_device(*arrays).values()) if arrays else 0
    return out


def compiled_stats(compiled) -> dict:
    """Per-device bytes of a compiled program: arguments, outputs, temporaries, aliased,
    ``peak`` (arguments + outputs - aliased + temporaries), ``xla_peak`` (XLA's own;
    XLA:CPU's leaves temporaries out) and ``constants`` (baked into the program)."""
    from ..hlo import Program

    m = compiled.memory_analysis()
    if isinstance(m, (list, tuple)):
        m = m[0]
    out = dict(
        arguments=int(m.argument_size_in_bytes),
        outputs=int(m.output_size_in_bytes),
        temporaries=int(m.temp_size_in_bytes),
        aliased=int(m.alias_size_in_bytes),
    )
    out["peak"] = (out["arguments"] + out["outputs"] - out["aliased"]
                   + out["temporaries"])
    out["xla_peak"] = int(getattr(m, "peak_memory_in_bytes", 0) or 0)
    out["constants"] = Program(compiled.as_text()).constant_bytes()
    return out


def model_bytes(
    n: int,
    devices: int,
    k: int = 80,
    conn: str = "index",
    weights: bool = False,
    delay_steps: int = 1,
) -> list[tuple[str, float, bool]]:
    """Per-device rows ``(item, bytes, shrinks with more devices)`` for ``n`` neurons of
    ``k`` inputs.  ``conn``: ``"index"`` or ``"event"`` (else ``ValueError``);
    ``weights``: a float32 weight per synapse; ``delay_steps``: D spike vectors kept."""
    if conn not in ("index", "event"):
        raise ValueError(f"conn must be 'index' or 'event', not {conn!r}")
    per = n / devices
    rows = [("state (V, m, h, n, g_e, g_i)", STATE_BYTES_PER_NEURON * per, True),
            ("synapse ids (int32)", INDEX_BYTES_PER_SYNAPSE * k * per, True)]
    if weights:
        rows.append(("synapse weights (float32)", 4 * k * per, True))
    if conn == "event":
        rows.append(("row pointers (int32, 2 per source)", 4 * 2 * (n + 2), False))
    rows.append(
        (
            "gathered spikes, D steps (bool)",
            SPIKE_BYTES_PER_NEURON * n * delay_steps,
            False,
        )
    )
    return rows
