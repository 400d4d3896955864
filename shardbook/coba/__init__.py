"""The COBA-HH network of chapter 4, written once and used everywhere.

Benchmark 3 of Brette et al. (2007), J. Comput. Neurosci. 23:349-398: Hodgkin-Huxley
neurons with Traub-Miles kinetics, conductance-based exponential synapses, 80 %
excitatory and 20 % inhibitory neurons, sparse random connectivity, dt = 0.1 ms.  It
needs :func:`shardbook.book.setup_devices` to have run first, like every module that
imports BrainPy.

The package is split along the chapter's lines; a module imports only those above it:

  parameters   constants and sizes (imports nothing else of the package)
  once         quick compiles of once-per-network programs (imports nothing of it)
  randomness   random numbers made where they live (``sharded_random``, the graphs)
  events       event-driven connectivity: a CSR per device, delivered under shard_map
  ffi_handlers the CPU kernels' machine code and the C API they read (imports
               nothing of the package)
  kernels      the push delivery's CPU kernels (registered with XLA's FFI, self-tested)
  push         the push delivery: spike indices exchanged, spiking rows visited
  peer         brainevent's CSR kernel on each device's CSR (the peer to time against)
  network      the neuron ``HH``, ``FixedInDegree``, the network ``COBAHH``, ``build``
  connectivity what a graph is, read on each device: in-degrees, a fingerprint
  run          ``Simulation`` and activity statistics (rate, CV, Fano factor)
  regimes      the published forms, their regimes, bounds with stated coverage
  checkpoint   save and restore a simulation that names its network (Orbax)
  ledger       the memory model, predicted and measured
  timing       fair timings: variants interleaved, repeated, events beside every time
  timemodel    a time model that counts what the compiled step does

The names of :data:`__all__` are importable from ``shardbook.coba`` itself.
"""
from __future__ import annotations

from . import (
    checkpoint,
    connectivity,
    events,
    kernels,
    ledger,
    network,
    once,
    parameters,
    peer,
    push,
    randomness,
    regimes,
    run,
    timemodel,
    timing,
)
from .connectivity import fingerprint, in_degree
from .events import (
    CHUNK_FRACTION,
    EventCSR,
    chunk_size,
    deliver,
    local_csr,
    random_rows,
    rows_capacity,
)
from .ledger import (
    INDEX_BYTES_PER_SYNAPSE,
    SPIKE_BYTES_PER_NEURON,
    STATE_BYTES_PER_NEURON,
    SYNAPSES_PER_NEURON,
    compiled_stats,
    conn_bytes_total,
    event_bytes,
    fit_bytes_per_device,
    gathered_bytes,
    measured_bytes,
    model_bytes,
    net_arrays,
    peak_tolerance,
    predict,
)
from .network import COBAHH, HH, FixedInDegree, build
from .parameters import *  # noqa: F403  (the names of parameters.__all__)
from .push import DeliveryOverflow, PushCSR, SpikeExchange
from .randomness import (
    bernoulli_k_max,
    bernoulli_sources,
    random_state,
    random_state_axes,
    sharded_random,
    zeros_variable,
)
from .run import (
    ISI_EDGES_MS,
    Simulation,
    cv_isi,
    fano_factor,
    isi_histogram,
    isis_ms,
    population_rate,
    rate_hz,
    regime,
)

__all__ = [
    *parameters.__all__,
    "CHUNK_FRACTION", "COBAHH", "DeliveryOverflow", "EventCSR", "FixedInDegree", "HH",
    "INDEX_BYTES_PER_SYNAPSE", "ISI_EDGES_MS", "PushCSR", "SPIKE_BYTES_PER_NEURON",
    "STATE_BYTES_PER_NEURON", "SYNAPSES_PER_NEURON", "Simulation", "SpikeExchange",
    "bernoulli_k_max", "bernoulli_sources", "build", "checkpoint", "chunk_size",
    "compiled_stats", "conn_bytes_total", "connectivity", "cv_isi", "deliver",
    "event_bytes", "events", "fano_factor", "fingerprint", "fit_bytes_per_device",
    "gathered_bytes", "in_degree", "isi_histogram", "isis_ms", "kernels", "ledger",
    "local_csr", "measured_bytes", "model_bytes", "net_arrays", "network", "once",
    "parameters", "peak_tolerance", "peer", "population_rate", "predict",
    "push", "random_rows", "random_state", "random_state_axes", "randomness", "rate_hz",
    "regime", "regimes", "rows_capacity", "run", "sharded_random", "timemodel",
    "timing", "zeros_variable",
]
