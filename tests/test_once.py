"""Quick compiles of once-per-network programs (``coba.once``), and the cached CPU
kernels (``coba.kernels``, their handlers in ``shardbook/coba/ffi_handlers.py``)."""

import ast
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from shardbook import book, coba

once = coba.once
ROOT = Path(__file__).resolve().parents[1]


def _graph(x):  # an integer program, like the builders: counts and a hash
    return jnp.cumsum(x % 7, dtype=jnp.int32), jnp.sum(x * 40503, dtype=jnp.int32)


def test_once_jit_gives_jits_integers_for_every_kind_of_input():
    x = np.arange(4 * 1000, dtype=np.int32)
    mesh = jax.sharding.Mesh(np.array(book.devices()[:4]), ("neuron",))
    inputs = {
        "numpy": x,
        "uncommitted": jnp.asarray(x),
        "sharded": jax.device_put(x, NamedSharding(mesh, P("neuron"))),
    }
    quick = once.once_jit(_graph)
    for name, arg in inputs.items():
        got, want = quick(arg), jax.jit(_graph)(arg)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)
    sharded = ((x.shape, x.dtype, inputs["sharded"].sharding),)
    assert sharded in quick.compiled  # a program of its own for the sharded input


def test_once_jit_inside_a_trace_is_inlined():
    quick = once.once_jit(_graph)
    x = np.arange(64, dtype=np.int32)
    got = jax.jit(lambda v: quick(v)[1])(x)
    assert int(got) == int(_graph(x)[1]) and not quick.compiled


class _Recorder:
    """A lowered program's shapes, recording what it is compiled with."""

    def __init__(self, lowered):
        self.args_info, self.out_info, self.options = (
            lowered.args_info, lowered.out_info, [])

    def compile(self, options=None):
        self.options.append(options)


def _options(fn, *shapes, work=0):
    args = [jax.ShapeDtypeStruct(shape, jnp.int32) for shape in shapes]
    rec = _Recorder(jax.jit(fn).lower(*args))
    once.compile_once(rec, work=work)
    return rec.options[0]


def test_compile_once_uses_the_quick_options_only_for_a_small_program():
    quick, limit = once.QUICK_OPTIONS, once.QUICK_LIMIT
    assert jax.default_backend() == "cpu"
    assert quick == {  # what once.py's docstring says, and what was measured
        "xla_backend_optimization_level": 0,
        "xla_cpu_use_fusion_emitters": False,
    }
    with pytest.raises(TypeError):  # read-only: no caller changes every builder's
        quick["xla_backend_optimization_level"] = 2  # choice behind the others' back

    def plus(x):
        return x + 1

    def fill(s):  # small in, large out: as a graph builder from its key
        return jnp.full((limit,), s)

    assert _options(plus, (limit - 1,)) == quick  # just under the limit: quick
    assert _options(plus, (limit,)) is None  # as large as the limit: optimised
    assert _options(fill, ()) is None  # a large output from a scalar
    assert _options(plus, (1000,), work=limit) is None  # a large draw, small output


def test_a_quick_compile_gives_the_optimised_compiles_integers():
    """once.py's premise, about XLA: the same integers with or without the options."""
    x = np.arange(5000, dtype=np.int32)
    lowered = jax.jit(_graph).lower(x)
    quick = lowered.compile(once.QUICK_OPTIONS)
    for got, want in zip(quick(x), lowered.compile()(x)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_the_older_fusion_emitter_changes_no_bit_of_the_initial_state():
    """The initial-state draws (floats) were quick-compiled at level 0 before the
    second option came: with it, every bit is the same, split or not, so no network
    changed.  (Checked on one generator here; the stored rasters of every chapter,
    strict nbval, are the wider check.)"""
    level0 = {"xla_backend_optimization_level": 0}
    assert {**level0, "xla_cpu_use_fusion_emitters": False} == once.QUICK_OPTIONS
    pops, projs = (("E", 336), ("I", 84)), (("EE", 8, 336, 336), ("IE", 2, 84, 336))
    key = jax.random.PRNGKey(7)
    for devices in (book.devices()[:1], book.devices()[:4]):
        mesh = jax.sharding.Mesh(np.array(devices), ("neuron",))
        axes = coba.random_state_axes(pops, projs, "random")
        shardings = {k: NamedSharding(mesh, P(*names)) for k, names in axes.items()}
        with jax.threefry_partitionable(True):
            lowered = jax.jit(
                coba.random_state, static_argnums=(1, 2, 3), out_shardings=shardings
            ).lower(key, pops, projs, "random")
        slow, quick = lowered.compile(level0), lowered.compile(once.QUICK_OPTIONS)
        # the option still does something (a retired XLA flag can be kept and
        # ignored): XLA:CPU's MLIR emitters wrap a lone instruction in a fusion
        assert slow.as_text().count("fusion(") > quick.as_text().count("fusion(")
        a, b = slow(key), quick(key)
        assert a.keys() == b.keys() and any(v.dtype == jnp.float32 for v in a.values())
        for k in a:
            want, got = np.asarray(a[k]), np.asarray(b[k])
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_handlers_answer_with_the_tested_c_api_version():
    # on this jaxlib the kernels register (the handlers' version is the header's) ...
    assert coba.kernels.available(), coba.kernels.why_not()
    assert coba.kernels.build_handlers()[1] == coba.kernels.api_version()
    # ... and handlers checked against another version would not be registered
    problem = coba.kernels.version_problem((0, 99))
    assert "(0, 99)" in problem and str(coba.kernels.api_version()) in problem


def test_handlers_of_another_c_api_are_never_registered(monkeypatch):
    k = coba.kernels
    funcs, _ = k.build_handlers()
    monkeypatch.setattr(k, "build_handlers", lambda: (funcs, (0, 99)))  # planted
    seen = []
    monkeypatch.setattr(jax.ffi, "register_ffi_target", lambda *a, **kw: seen.append(a))
    problem = k.register()
    assert "(0, 99)" in problem and not seen


def test_every_constant_the_cached_handlers_bake_in_is_in_their_own_file():
    """numba knows a cached cfunc is stale only from its own file's hash: a constant
    imported from another module would survive a change there."""
    tree = ast.parse((ROOT / "shardbook/coba/ffi_handlers.py").read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else a.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for a in node.names
    }
    relative = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    tools = {"__future__", "numba", "numba.extending", "numpy", "llvmlite"}
    assert not relative and imported <= tools, imported - tools
