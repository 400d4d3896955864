"""The COBA-HH network of chapter 4, written once and used everywhere.

Benchmark 3 of Brette et al. (2007), J. Comput. Neurosci. 23:349-398: Hodgkin-Huxley
neurons with Traub-Miles kinetics, conductance-based exponential synapses, 80 % excitatory
and 20 % inhibitory neurons, sparse random connectivity, dt = 0.1 ms.  It needs
:func:`shardbook.setup_devices` to have run first, like every module that imports BrainPy.

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

Every name is also importable from ``shardbook.coba`` itself, as before the split.
"""
from __future__ import annotations

import inspect

from .parameters import *  # noqa: F401,F403
from .parameters import (DT, GE0_MEAN, GE0_SD, GI0_MEAN, GI0_SD, GRAPHS, K_EXC, K_INH,
                         KICK_FROM, KICK_NEURONS, KICK_RATE, KICK_TO,
                         N_EXC_UNIT, N_INH_UNIT, NEURON, P_CONN, V0_MEAN, V0_SD,
                         REPRESENTATIONS, STARTS, V_th, VT, nest_initial_gates, sizes)
from .randomness import (_compiled, _partitionable, _zeros, _zeros_of, bernoulli_k_max,
                         bernoulli_sources, random_state, random_state_axes, sharded_random,
                         zeros_variable)
from .events import (CHUNK_FRACTION, EventCSR, chunk_size, deliver, local_csr, random_rows,
                     rows_capacity)
from . import kernels, peer, push
from .push import DeliveryOverflow, PushCSR, SpikeExchange
from .network import COBAHH, HH, FixedInDegree, _count_sources, _csr_conn, build
from .connectivity import fingerprint, in_degree
from .run import (ISI_EDGES_MS, Simulation, cv_isi, fano_factor, isi_histogram, isis_ms,
                  population_rate, rate_hz, regime)
from .ledger import (event_bytes, model_bytes, INDEX_BYTES_PER_SYNAPSE, SPIKE_BYTES_PER_NEURON, STATE_BYTES_PER_NEURON,
                     SYNAPSES_PER_NEURON, _leaf, comm_output, compiled_stats, conn_bytes_total,
                     fit_bytes_per_device, measured_bytes, net_arrays, peak_tolerance,
                     predict)
from .sweep import (DATA_FILE, REGIME_SCHEMA, SCHEMA, VARIANTS, device_memory, load_scaling,
                    measure_regime, measure_size,
                    provenance, validate_scaling)
from .plots import plot_scaling
from . import (checkpoint, connectivity, events, ledger, network, parameters, plots,
               randomness, regimes, run, sweep, timemodel, timing)

MODULES = (parameters, randomness, events, kernels, push, peer, network, connectivity, run,
           timing, regimes, checkpoint, ledger, timemodel, sweep, plots)


def source_section(title: str) -> str:
    """The source of one module of this package, by its name (e.g. ``"parameters"``)."""
    for mod in MODULES:
        if mod.__name__.rsplit(".", 1)[-1] == title:
            return inspect.getsource(mod)
    raise KeyError(f"no section {title!r}")


def excerpt(obj, *names: str, max_lines: int = 40) -> str:
    """Short source: the definition lines of ``obj`` and of its methods ``names``."""
    if not names:
        lines = inspect.getsource(obj).splitlines()
        return "\n".join(lines[:max_lines] + (["    ..."] if len(lines) > max_lines else []))
    return "\n\n".join(inspect.getsource(getattr(obj, n)).rstrip() for n in names)


def show_source(obj, title: str | None = None):
    """The source of ``obj`` (or a string) as a Markdown code block, for a notebook."""
    from IPython.display import Markdown

    text = obj if isinstance(obj, str) else inspect.getsource(obj)
    head = f"**{title}**\n\n" if title else ""
    return Markdown(f"{head}```python\n{text.rstrip()}\n```")
