"""Parameters of COBA-HH (Brette et al. 2007, benchmark 3), and the network's sizes.

Units: mV, ms, nS, pF (nS * mV / pF = mV / ms); values of BrainPy's examples
(``ei_nets/Brette_2007_COBAHH.py``) and Brian 2's ``examples/COBAHH.py``.  Imports
nothing from the package.
"""
from __future__ import annotations

import brainpy.math as bm

__all__ = ["DT", "Cm", "gl", "g_Na", "g_Kd", "El", "ENa", "EK", "VT", "V_th", "taue",
           "taui", "Ee", "Ei", "we", "wi", "K_EXC", "K_INH", "N_EXC_UNIT", "N_INH_UNIT",
           "P_CONN", "NEURON", "V0_MEAN", "V0_SD", "GE0_MEAN", "GE0_SD", "GI0_MEAN",
           "GI0_SD", "KICK_NEURONS", "KICK_RATE", "KICK_FROM", "KICK_TO",
           "REPRESENTATIONS", "DEFAULT_CONN", "GRAPHS", "STARTS", "nest_initial_gates",
           "sizes"]

NEURON = bm.sharding.NEU_AXIS  # the mesh axis name, 'neuron'

# region: coba.parameters
DT = 0.1                                      # ms
Cm = 200.                                     # membrane capacitance, pF
gl, g_Na, g_Kd = 10., 20_000., 6_000.         # leak, sodium, potassium conductances, nS
El, ENa, EK = -60., 50., -90.                 # reversal potentials, mV
VT = -63.                                     # Traub-Miles threshold shift, mV
V_th = -20.                                   # a spike is V crossing -20 mV upwards
taue, taui = 5., 10.                          # synaptic time constants, ms
Ee, Ei = 0., -80.                             # synaptic reversal potentials, mV
we, wi = 6., 67.                              # synaptic weights (conductance jumps), nS
K_EXC, K_INH = 64, 16                         # fixed in-degree: 80 inputs = 2 % of 4000
N_EXC_UNIT, N_INH_UNIT = 3360, 840            # scale 1: 4200 neurons; 840 = lcm(1..8)
P_CONN = 0.02                                 # the benchmark's connection probability
# endregion

# The benchmark's randomised start (Brian 2, examples/COBAHH.py, after Brette et al.):
# V = El + (5 randn - 5) mV, g_e = (1.5 randn + 4) 10 nS, g_i = (12 randn + 20) 10 nS.
V0_MEAN, V0_SD = El - 5., 5.
GE0_MEAN, GE0_SD = 40., 15.
GI0_MEAN, GI0_SD = 200., 120.

# NEST's start (hh_coba.py): all at E_L with hh_cond_exp_traub's gates, g zero, and a
# 300 Hz Poisson kick onto the first 50 E neurons from 1 to 51 ms, each event +we in g_e
KICK_NEURONS, KICK_RATE = 50, 300.            # neurons, Hz
KICK_FROM, KICK_TO = 1., 51.                  # ms

REPRESENTATIONS = ("index", "mask", "csr", "jit", "event", "push", "brainevent")
# Push (coba.push): the fastest measured on one CPU device, with no O(N) pass and no
# data-dependent loop.  The two demonstrations about the index matrix
# (as_variable=False, layout="sliced") keep "index".
DEFAULT_CONN = "push"
GRAPHS = ("fixed", "bernoulli", "rows")  # fixed in-degree, Bernoulli, or drawn by row
# conductances at zero, the benchmark's randomised start (Brian 2), or NEST's kick
STARTS = ("rest", "random", "kick")


def nest_initial_gates() -> tuple[float, float, float]:
    """(m, h, n) as NEST's ``hh_cond_exp_traub`` starts them (``State_``): the rate
    functions' equilibrium at E_L = -60 mV, without the V_T shift."""
    import math

    v = El
    a_n = 0.032 * (15. - v) / (math.exp((15. - v) / 5.) - 1.)
    b_n = 0.5 * math.exp((10. - v) / 40.)
    a_m = 0.32 * (13. - v) / (math.exp((13. - v) / 4.) - 1.)
    b_m = 0.28 * (v - 40.) / (math.exp((v - 40.) / 5.) - 1.)
    a_h = 0.128 * math.exp((17. - v) / 18.)
    b_h = 4. / (1. + math.exp((40. - v) / 5.))
    return a_m / (a_m + b_m), a_h / (a_h + b_h), a_n / (a_n + b_n)


def sizes(scale: float = 1) -> tuple[int, int]:
    """(excitatory, inhibitory) neuron counts at ``scale`` (in-degree stays 80);
    ``ValueError`` if that gives no neurons."""
    n_exc, n_inh = round(N_EXC_UNIT * scale), round(N_INH_UNIT * scale)
    if n_exc < 1 or n_inh < 1:
        raise ValueError(f"scale {scale} gives no neurons")
    return n_exc, n_inh
