"""Tests of the shared helpers: each check must pass on what it claims and fail
otherwise."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pyrun  # tests/pyrun.py
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardbook import book, coba, hlo, memory, shards

DeviceSetupError, setup_devices = book.DeviceSetupError, book.setup_devices

N = jax.device_count()


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()), ("x",))


def test_device_count_took_effect():
    assert N == 4
    info = setup_devices(verbose=False)  # a second call is harmless
    assert info.count == 4 and info.simulated


def test_changed_count_after_start_raises(monkeypatch):
    monkeypatch.setenv("BOOK_NUM_DEVICES", "2")
    with pytest.raises(DeviceSetupError, match="Restart the kernel"):
        setup_devices(verbose=False)


def test_bad_env_value(monkeypatch):
    monkeypatch.setenv("BOOK_NUM_DEVICES", "eight")
    with pytest.raises(DeviceSetupError, match="not an integer"):
        setup_devices(verbose=False)


def test_too_late_in_fresh_process():
    """Importing brainpy first starts the backend with 1 device; setup_devices must say
    so."""
    code = (
        "import os; os.environ['BOOK_NUM_DEVICES']='3'\n"
        "os.environ['JAX_PLATFORMS']='cpu'\n"
        "import brainpy\n"
        "from shardbook import setup_devices, DeviceSetupError\n"
        "try:\n    setup_devices(verbose=False)\n"
        "except DeviceSetupError as e:\n    print('raised', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS",)}
    out = pyrun.python("-c", code, env=env)
    assert (
        "raised JAX is running with 1 CPU device(s), but 3 were requested" in out.stdout
    ), out.stderr[-2000:]


def test_shard_rows_and_tiling(mesh):
    x = jax.device_put(
        jnp.arange(8 * 6, dtype=jnp.float32).reshape(8, 6), NamedSharding(mesh, P("x"))
    )
    rows = shards.shard_rows(x)
    assert [r["shape"] for r in rows] == [(2, 6)] * 4
    assert sum(r["nbytes"] for r in rows) == x.nbytes
    shards.check_tiling(x)
    shards.check_sharding(x, P("x"))
    with pytest.raises(AssertionError):
        shards.check_sharding(x, P(None, "x"))
    assert shards.bytes_per_device(x) == {d.id: x.nbytes // 4 for d in jax.devices()}
    assert "NamedSharding" in shards.shard_table(x)


def test_replicated_counts_full_bytes_everywhere(mesh):
    x = jax.device_put(jnp.ones((8, 6)), NamedSharding(mesh, P()))
    shards.check_tiling(x)
    assert shards.is_replicated(x)
    assert set(shards.bytes_per_device(x).values()) == {x.nbytes}
    with pytest.raises(AssertionError):
        shards.check_sharding(x, P("x"))


def test_brainpy_array_unwraps(mesh):
    import brainpy.math as bm

    a = bm.sharding.partition_by_sharding(bm.ones((8, 3)), NamedSharding(mesh, P("x")))
    shards.check_sharding(a, P("x"))
    assert shards.max_bytes_per_device(a) == 2 * 3 * 4
    with pytest.raises(TypeError):
        shards.as_jax([1, 2])


# A time loop (known trip count 10) whose body holds five fusions, an async all-gather,
# a loop XLA could not bound and one it could: what the time model counts per step.
CENSUS_HLO = """HloModule m, num_partitions=2

%inner_body (a: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  ROOT %b = s32[] add(%a, %a)
}

%inner_cond (a: s32[]) -> pred[] {
  %a = s32[] parameter(0)
  ROOT %c = pred[] constant(true)
}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8] get-tuple-element(%p), index=1
  %f1 = f32[8] fusion(%x), kind=kLoop, calls=%inner_body
  %f2 = f32[8] fusion(%f1), kind=kLoop, calls=%inner_body
  %f3 = f32[8] fusion(%f2), kind=kLoop, calls=%inner_body
  %f4 = f32[8] fusion(%f3), kind=kLoop, calls=%inner_body
  %f5 = f32[8] fusion(%f4), kind=kLoop, calls=%inner_body
  %g = f32[16] all-gather-start(%f5), dimensions={0}
  %gd = f32[16] all-gather-done(%g)
  %w = s32[] while(%i), condition=%inner_cond, body=%inner_body
  %w3 = s32[] while(%i), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %t = (s32[], f32[8]) tuple(%w, %f5)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (x: (s32[], f32[8])) -> (s32[], f32[8]) {
  %x = (s32[], f32[8]) parameter(0)
  ROOT %loop = (s32[], f32[8]) while(%x), condition=%cond, body=%body, \
backend_config={"known_trip_count":{"n":"10"}}
}
"""


def test_the_time_models_counts_are_read_by_the_one_reader():
    prog = hlo.Program(CENSUS_HLO, "gpu")
    loop = prog.time_loop()
    assert loop.known_trip_count == 10 and loop.body == "body"
    assert prog.body_ops(loop).count("fusion") == 5
    got = coba.timemodel.census_counts(prog.text)
    # five fusions are one CUDA graph; the all-gather and each inner while launch alone;
    # only the unbounded while waits on the host
    assert got == dict(kernels=8, launches=4, collectives=1, host_syncs=1)
    # a text-less copy keeps the instructions; an older file without them refuses
    back = hlo.Program.from_json(prog.to_json(text=False))
    assert back.body_ops(back.time_loop()) == prog.body_ops(loop)
    old = {k: v for k, v in prog.to_json(text=False).items() if k != "ops"}
    with pytest.raises(ValueError, match="without its instructions"):
        hlo.Program.from_json(old).body_ops(loop)
    assert prog.custom_calls == ()
    call = hlo.Program("ENTRY %main (p: f32[4]) -> f32[4] {\n  ROOT %c = f32[4] "
                       'custom-call(%p), custom_call_target="shardbook_coba_push"\n}\n')
    assert call.custom_calls == ("shardbook_coba_push",)
    assert hlo.Program.from_json(call.to_json(text=False)).custom_calls == call.custom_calls
    unknown = {k: v for k, v in call.to_json(text=False).items() if k != "custom_calls"}
    assert hlo.Program.from_json(unknown).custom_calls is None  # not (): not known
    with pytest.raises(ValueError, match="no time loop"):
        hlo.Program("ENTRY %main (p: f32[4]) -> f32[4] {\n}\n").time_loop()


def test_hlo_collectives_per_step(mesh):
    w = jax.device_put(jnp.ones((16, 16)), NamedSharding(mesh, P(None, "x")))
    h0 = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P()))

    def f(w, h):
        def body(h, _):
            h = jnp.tanh(h @ w)
            return h, h.sum()

        return jax.lax.scan(body, h, None, length=5)[1].sum()

    prog = hlo.Program(jax.jit(f).lower(w, h0).compile())
    assert prog.compiler == "cpu" and prog.devices == N
    per_step = prog.counts(per_step=True)
    assert sum(per_step.values()) >= 1, prog.summary()
    assert [(w.phase, w.known_trip_count) for w in prog.whiles] == [("fwd", 5)]
    assert all(c.loop == 0 and c.phase == "fwd" for c in prog.collectives if c.per_step)
    # an unsharded program has none
    one = hlo.Program(jax.jit(f).lower(jnp.ones((16, 16)), jnp.ones((8, 16))).compile())
    assert one.collectives == () and one.devices == 1
    assert one.summary().startswith("no collectives")


def test_hlo_parses_async_and_tuples():
    text = (
        "ENTRY %main (p: f32[4]) -> f32[4] {\n"
        "  %ars = (f32[4]{0}, f32[16]{0}) all-gather-start(%p), dimensions={0}\n"
        "  %ard = f32[16]{0} all-gather-done(%ars)\n"
        "  %ar = (f32[4]{0}, f32[2,2]{1,0}) all-reduce(%a, %b), to_apply=%add\n"
        "  %c = f32[512,512]{1,0} constant({...})\n"
        "}\n"
    )
    prog = hlo.Program(text, "gpu")
    assert [(c.op, c.async_) for c in prog.collectives] == [
        ("all-gather", True),
        ("all-reduce", False),
    ]
    assert prog.collectives[0].nbytes == 64 and prog.collectives[1].nbytes == 32
    assert prog.collectives[1].shapes == ("f32[4]", "f32[2,2]")
    assert prog.constant_bytes() == 512 * 512 * 4
    assert prog.constants() == [("f32[512,512]", 512 * 512 * 4)]


def test_closure_constant_is_full_size_on_every_device(mesh):
    rng = np.random.default_rng(0)  # random data: XLA cannot fold it into a broadcast
    big = jax.device_put(
        rng.standard_normal((256, 256), dtype=np.float32), NamedSharding(mesh, P("x"))
    )
    as_const = hlo.Program(jax.jit(lambda v: big @ v).lower(jnp.ones(256)).compile())
    as_arg = hlo.Program(
        jax.jit(lambda m, v: m @ v).lower(big, jnp.ones(256)).compile()
    )
    assert as_const.constant_bytes() == 256 * 256 * 4
    assert as_arg.constant_bytes() == 0
    assert as_arg.memory["arguments"] == 256 * 256 * 4 // 4 + 256 * 4


def test_ledger_checks():
    led = memory.Ledger("t").add("a", 100, 100.5).add("b", 1000, 1000)
    led.check()
    assert "predicted" in str(led)
    with pytest.raises(AssertionError, match="b: predicted"):
        memory.Ledger("t").add("b", 1000, 1200, rtol=0.1).check()


def test_largest_fitting():
    assert memory.largest_fitting(lambda n: 8 * n, 800) == 100
    assert memory.largest_fitting(lambda n: 8 * n, 800, step=840) == 0
    assert memory.largest_fitting(lambda n: n * n, 1e6, step=10) == 1000
    assert memory.fmt_bytes(3 * 2**30) == "3.00 GiB"


def test_plots_run(mesh):
    import matplotlib

    matplotlib.use("Agg")
    from shardbook import plotting
    x = jax.device_put(jnp.ones((8, 4, 12)), NamedSharding(mesh, P("x", None, None)))
    assert plotting.owner_map(x, 0)[0] == [0] and len(plotting.owner_map(x, 1)[0]) == 4
    plotting.plot_axis_ownership(x, ["batch", "time", "neuron"])
    plotting.plot_bytes_vs_devices(
        [1, 2, 4], {"a": [4, 2, 1]}, predicted={"a": [4, 2, 1]}
    )


def test_mesh_shape_2d():
    mesh_shape_2d = book.mesh_shape_2d
    assert [mesh_shape_2d(k) for k in range(1, 9)] == [
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 2),
        (1, 5),
        (2, 3),
        (1, 7),
        (2, 4),
    ]


def test_check_tiling_against_host_data_catches_a_wrong_layout(mesh):
    """Shards placed on the wrong devices reassemble to a wrong array, and
    ``np.asarray(arr)`` agrees with those shards; only the host data exposes it."""
    host = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    sharding = NamedSharding(mesh, P("x"))
    good = jax.device_put(host, sharding)
    shards.check_tiling(good, host)
    shards.check_tiling(good)
    # device d receives the block meant for device d + 1: a wrong layout
    devices = list(sharding.addressable_devices_indices_map(host.shape))
    idx = sharding.addressable_devices_indices_map(host.shape)
    blocks = [host[idx[d]] for d in devices]
    wrong = jax.make_array_from_single_device_arrays(
        host.shape,
        sharding,
        [
            jax.device_put(blocks[(i + 1) % len(devices)], d)
            for i, d in enumerate(devices)
        ],
    )
    shards.check_tiling(wrong)  # without the host data the defect is invisible
    with pytest.raises(AssertionError, match="holds the wrong data"):
        shards.check_tiling(wrong, host)
    with pytest.raises(AssertionError, match="shape"):
        shards.check_tiling(good, host[:4])


def test_byte_axis_ticks_are_round_powers_of_ten():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shardbook import plotting
    assert plotting.round_bytes(1e4) == "10 kB" and plotting.round_bytes(1e6) == "1 MB"
    assert plotting.round_bytes(100) == "100 B"
    ax = plotting.plot_bytes_vs_devices(
        [1, 2, 4], {"a": [3e6, 1.5e6, 7.5e5], "b": [5e3] * 3}
    )
    ticks = list(ax.get_yticks())
    assert ticks == [1e4, 1e5, 1e6]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["10 kB", "100 kB", "1 MB"]
    plt.close("all")


def test_hlo_counts_every_result_of_an_async_combined_collective():
    """XLA:GPU's async starts return (operands, results[, context]); combined ones carry
    several results.  Counting only one shape under-reports the bytes (seen on H200)."""
    text = """ENTRY %main (p: f32[8]) -> f32[8] {
  %ags = ((pred[420]{0}, pred[105]{0}), (pred[3360]{0}, pred[840]{0})) all-gather-start(pred[420]{0} %a, pred[105]{0} %b), channel_id=1
  %ars = (f32[4,32]{1,0}, f32[32,32]{1,0}) all-reduce-start(f32[4,32]{1,0} %x, f32[32,32]{1,0} %y), channel_id=2
  %cps = (f32[8]{0}, f32[8]{0}, u32[], u32[]) collective-permute-start(f32[8]{0} %z), channel_id=3
}"""
    cs = hlo.Program(text, "gpu").collectives
    assert [(c.op, c.nbytes) for c in cs] == [
        ("all-gather", 3360 + 840),
        ("all-reduce", 4 * (4 * 32 + 32 * 32)),
        ("collective-permute", 32),
    ]
    assert cs[0].shapes == ("pred[3360]", "pred[840]") and cs[2].shapes == ("f32[8]",)


def test_the_region_shows_a_line_the_reader_parses():
    """The raw HLO line the chapters show (region hlo.collective-line) is one the
    reader understands: the tuple all-reduce of chapter 2's three gradients."""
    from shardbook import book

    assert "EXAMPLE_LINE" in book.region("hlo.collective-line")
    text = "ENTRY %main (p: f32[4]) -> f32[4] {\n  " + hlo.EXAMPLE_LINE + "\n}\n"
    (c,) = hlo.Program(text, "cpu").collectives
    assert (c.op, c.async_, c.phase) == ("all-reduce", False, "once")
    assert c.shapes == ("f32[32,4]", "f32[32,32]", "f32[2,32]")
    assert c.nbytes == 4 * (32 * 4 + 32 * 32 + 2 * 32) == 4864


def test_device_memory_stats_says_what_each_platform_keeps():
    """CPU devices keep no statistics (None); a platform that does otherwise raises."""
    from shardbook import book

    class Dev:
        def __init__(self, platform, stats):
            self.platform, self.stats = platform, stats

        def memory_stats(self):
            return self.stats

    assert memory.device_memory_stats(book.devices()) is None  # XLA:CPU here
    gpu = [Dev("gpu", {"bytes_in_use": 0})]
    assert memory.device_memory_stats(gpu) == [{"bytes_in_use": 0}]
    with pytest.raises(AssertionError, match="keep no memory statistics"):
        memory.device_memory_stats([Dev("gpu", None)])  # planted: a silent skip
    with pytest.raises(AssertionError, match="keep memory statistics"):
        memory.device_memory_stats([Dev("cpu", {"bytes_in_use": 0})])


def test_hlo_reads_each_replica_group_form_and_the_bytes_sent():
    """A collective's group size in the three forms XLA prints, and what one device
    sends on a ring of that group (hardware.sent_per_call).  Planted: reading every
    collective as spanning all devices would charge the 2-D mesh's batch all-reduce
    over 2 devices as over 8."""

    text = """HloModule m, num_partitions=8
ENTRY %main (p: f32[8]) -> f32[8] {
  %a = f32[100]{0} all-reduce(f32[100]{0} %p), replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, to_apply=%add
  %b = f32[100]{0} all-gather(f32[25]{0} %p), replica_groups=[2,4]<=[8], dimensions={0}
  %c = f32[10]{0} reduce-scatter(f32[80]{0} %p), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  %d = f32[8]{0} collective-permute(f32[8]{0} %p), source_target_pairs={{0,1},{1,0}}
  %e = f32[4]{0} all-reduce(f32[4]{0} %p), replica_groups={}, to_apply=%add
}"""
    prog = hlo.Program(text, "cpu")
    assert [c.group for c in prog.collectives] == [2, 4, 8, None, 8]
    from shardbook import hardware as hw
    sent = hw.sent_per_call(prog)
    assert sent == (2 * 1 / 2 * 400 + 3 / 4 * 400 + 7 * 40 + 32 + 2 * 7 / 8 * 16)
    everywhere = sum(hw.ring_sent_bytes(c.op, c.nbytes, prog.devices)
                     for c in prog.collectives)
    assert everywhere != sent  # the planted reading differs
    # a form the reader does not know is refused, not read as every device
    sub_axis = text.replace("{'axis_0'}", "{'axis_1':(1)2}")
    unread = hlo.Program(sub_axis, "cpu")
    assert unread.collectives[0].group is None
    with pytest.raises(ValueError, match="replica groups"):
        hw.sent_per_call(unread)
