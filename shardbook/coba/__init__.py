"""The COBA-HH network of chapter 4, written once and used everywhere.

Benchmark 3 of Brette et al. (2007), J. Comput. Neurosci. 23:349-398: Hodgkin-Huxley
neurons with Traub-Miles kinetics, conductance-based exponential synapses, 80 %
excitatory and 20 % inhibitory neurons, sparse random connectivity, dt = 0.1 ms.  It
needs :func:`shardbook.setup_devices` to have run first, like every module that imports
BrainPy.

The package is split along the chapter's lines; imports point one way, down this list:

  parameters   constants and sizes (imports nothing else of the package)
  randomness   random numbers made where they live (``sharded_random``, the graphs)
  events       event-driven connectivity: a CSR per device, delivered under shard_map
  kernels      the push delivery's CPU kernels (numba cfuncs called by XLA's FFI)
  push         the push delivery: spike indices exchanged, spiking rows visited
  peer         brainevent's CSR kernel on each device's CSR (the peer to time against)
  network      the neuron ``HH``, ``FixedInDegree``, the network ``COBAHH``, ``build``
  connectivity what a graph is, read on each device: in-degrees, a fingerprint
  run          ``Simulation`` and activity statistics (rate, CV, Fano factor)
  regimes      the published forms, their regimes, bounds with stated coverage
  checkpoint   save and restore a simulation that names its network (Orbax)
  timing       fair timings: variants interleaved, repeated, events beside every time
  ledger       the memory model, predicted and measured
  timemodel    a time model that counts what the compiled step does
  sweep        one size's measurement and the scaling data file of ``ci/coba_sweep.py``
  plots        plots of those measurements

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
    parameters,
    peer,
    plots,
    push,
    randomness,
    regimes,
    run,
    sweep,
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
    comm_output,
    compiled_stats,
    conn_bytes_total,
    event_bytes,
    fit_bytes_per_device,
    measured_bytes,
    model_bytes,
    net_arrays,
    peak_tolerance,
    predict,
)
from .network import COBAHH, HH, FixedInDegree, build
from .parameters import (
    DEFAULT_CONN,
    DT,
    EK,
    GE0_MEAN,
    GE0_SD,
    GI0_MEAN,
    GI0_SD,
    GRAPHS,
    K_EXC,
    K_INH,
    KICK_FROM,
    KICK_NEURONS,
    KICK_RATE,
    KICK_TO,
    N_EXC_UNIT,
    N_INH_UNIT,
    NEURON,
    P_CONN,
    REPRESENTATIONS,
    STARTS,
    V0_MEAN,
    V0_SD,
    VT,
    Cm,
    Ee,
    Ei,
    El,
    ENa,
    V_th,
    g_Kd,
    g_Na,
    gl,
    nest_initial_gates,
    sizes,
    taue,
    taui,
    we,
    wi,
)
from .plots import plot_scaling
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
from .sweep import (
    DATA_FILE,
    REGIME_SCHEMA,
    SCHEMA,
    VARIANTS,
    device_memory,
    load_scaling,
    measure_regime,
    measure_size,
    provenance,
    validate_scaling,
)

__all__ = ["CHUNK_FRACTION", "COBAHH", "Cm", "DATA_FILE", "DEFAULT_CONN", "DT",
           "DeliveryOverflow", "EK", "ENa", "Ee", "Ei", "El", "EventCSR",
           "FixedInDegree", "GE0_MEAN", "GE0_SD", "GI0_MEAN", "GI0_SD", "GRAPHS", "HH",
           "INDEX_BYTES_PER_SYNAPSE", "ISI_EDGES_MS", "KICK_FROM", "KICK_NEURONS",
           "KICK_RATE", "KICK_TO", "K_EXC", "K_INH", "NEURON", "N_EXC_UNIT",
           "N_INH_UNIT", "P_CONN", "PushCSR", "REGIME_SCHEMA", "REPRESENTATIONS",
           "SCHEMA", "SPIKE_BYTES_PER_NEURON", "STARTS", "STATE_BYTES_PER_NEURON",
           "SYNAPSES_PER_NEURON", "Simulation", "SpikeExchange", "V0_MEAN", "V0_SD",
           "VARIANTS", "VT", "V_th", "bernoulli_k_max", "bernoulli_sources", "build",
           "checkpoint", "chunk_size", "comm_output", "compiled_stats",
           "conn_bytes_total", "connectivity", "cv_isi", "deliver", "device_memory",
           "event_bytes", "events", "fano_factor", "fingerprint",
           "fit_bytes_per_device", "g_Kd", "g_Na", "gl", "in_degree", "isi_histogram",
           "isis_ms", "kernels", "ledger", "load_scaling", "local_csr",
           "measure_regime", "measure_size", "measured_bytes", "model_bytes",
           "nest_initial_gates", "net_arrays", "network", "parameters",
           "peak_tolerance", "peer", "plot_scaling", "plots", "population_rate",
           "predict", "provenance", "push", "random_rows", "random_state",
           "random_state_axes", "randomness", "rate_hz", "regime", "regimes",
           "rows_capacity", "run", "sharded_random", "sizes", "sweep", "taue", "taui",
           "timemodel", "timing", "validate_scaling", "we", "wi", "zeros_variable"]
