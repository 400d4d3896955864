"""``shardbook.traces``: a profiler trace written, read back against the compiled
program, and its verdicts, on 4 simulated CPU devices.

* A real trace of a matmul whose contraction is split holds one all-reduce event per
  step and device, as the compiled program says; a trace read against a program
  without that collective, or for a wrong number of steps, fails the check.
* The share of the collectives in the op time is computed from the events' durations
  (a hand-written XSpace with known durations), and a bound it does not meet fails.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardbook import book, traces
from shardbook.hlo import Program

N = len(book.devices())


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    mesh = Mesh(np.array(book.devices()), ("k",))
    x = jax.device_put(jnp.ones((16, 8 * N)), NamedSharding(mesh, P(None, "k")))
    w = jax.device_put(jnp.ones((8 * N, 12)), NamedSharding(mesh, P("k", None)))
    step = jax.jit(lambda a, b: a @ b, out_shardings=NamedSharding(mesh, P()))
    compiled = step.lower(x, w).compile()
    compiled(x, w).block_until_ready()
    path = traces.record(compiled, x, w, steps=2, log_dir=tmp_path_factory.mktemp("t"))
    other = jax.jit(lambda a: 2 * a).lower(x).compile()  # no collective
    return path, Program(compiled), Program(other)


def test_the_trace_holds_what_the_program_launches(traced):
    path, program, _ = traced
    assert path.name.endswith(".xplane.pb") and path.stat().st_size > 0
    trace = traces.read(path, program)
    assert trace.count("all-reduce") == 2 * N
    assert trace.check(steps=2) == {"all-reduce": 2 * N}
    assert 0 < trace.share() <= 1
    assert trace.op_ns() > trace.collective_ns() > 0
    text = trace.verdict(steps=2)
    assert f"all-reduce {2 * N} event(s) = 2 step(s) x {N} device(s)" in text


def test_a_wrong_program_or_step_count_fails(traced):
    path, program, other = traced
    with pytest.raises(AssertionError, match="launch"):
        traces.read(path, program).check(steps=3)
    wrong = traces.read(path, other)  # no instruction of it is an all-reduce
    assert wrong.count("all-reduce") == 0
    with pytest.raises(AssertionError, match="launch"):
        traces.Trace(traces.read(path, program).events, other).check(steps=2)


def xspace(*planes) -> str:
    """An XSpace in protobuf text: each plane is (name, line name, events, stats),
    each event (name, offset_ps, duration_ps, hlo_op or None); stats names the
    plane's stat metadata (id 10: hlo_op)."""
    out = []
    for pid, (plane, line, events, stats) in enumerate(planes, start=1):
        names = list(dict.fromkeys(name for name, *_ in events))
        rows = []
        for name, offset, duration, hlo_op in events:
            stat = (
                f' stats {{ metadata_id: 10 str_value: "{hlo_op}" }}' if hlo_op else ""
            )
            rows.append(
                f"    events {{ metadata_id: {names.index(name) + 1} "
                f"offset_ps: {offset} duration_ps: {duration}{stat} }}"
            )
        meta = [
            f'  event_metadata {{ key: {i} value {{ id: {i} name: "{name}" }} }}'
            for i, name in enumerate(names, start=1)
        ]
        if stats:
            meta.append('  stat_metadata { key: 10 value { id: 10 name: "hlo_op" } }')
        out += [
            "planes {",
            f"  id: {pid}",
            f'  name: "{plane}"',
            "  lines {",
            f"    id: {pid}",
            f'    name: "{line}"',
            "    timestamp_ns: 1000",
            *rows,
            "  }",
            *meta,
            "}",
        ]
    return "\n".join(out) + "\n"


XSPACE = xspace(
    (
        "/host:CPU",
        "device 0",
        [
            ("all-reduce.1", 0, 300000, None),
            ("fusion", 400000, 100000, None),
            ("Rendezvous", 600000, 900000, None),
        ],
        False,
    )
)


def hlo(*collectives) -> str:
    """A one-fusion HLO module whose collective instructions are ``collectives``."""
    return (
        "\n".join(
            [
                "HloModule m",
                "ENTRY %main (p: f32[4]) -> f32[4] {",
                "  %p = f32[4]{0} parameter(0)",
                "  %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%f",
                *(f"  {line}" for line in collectives),
                "}",
            ]
        )
        + "\n"
    )


PROGRAM = hlo("ROOT %all-reduce.1 = f32[4]{0} all-reduce(%fusion), to_apply=%add")


def test_the_share_is_read_from_the_durations():
    profile = jax.profiler.ProfileData.from_text_proto(XSPACE)
    trace = traces.from_profile(profile, Program(PROGRAM, "cpu"))
    names = [e.name for e in trace.events]
    assert names == ["all-reduce.1", "fusion"]  # Rendezvous: not an instruction
    assert trace.share() == pytest.approx(0.75)
    assert trace.counts() == {"all-reduce": 1}
    assert "more than 50%" in trace.verdict(steps=1, above=0.5)
    with pytest.raises(AssertionError, match="not more than 80%"):
        trace.verdict(steps=1, above=0.8)
    with pytest.raises(AssertionError, match="not less than 50%"):
        trace.verdict(steps=1, below=0.5)
    assert trace.events[0].op == "all-reduce" and trace.events[1].op == "fusion"
    assert traces.collective_of("collective-permute-start") == "collective-permute"
    assert traces.collective_of("collective-permute-done") == "collective-permute"
    assert traces.collective_of("fusion") is None


# A GPU trace's device plane, hand-written: XLA's CUPTI collector names each event after
# the CUDA kernel (an NCCL kernel for a collective) and puts the HLO instruction in its
# hlo_op stat (xla/backends/profiler/gpu/cupti_collector.cc, CreateXEvent). The host
# plane's events must not be counted beside the device's.
GPU_XSPACE = xspace(
    ("/host:CPU", "python", [("all-reduce-start.1", 0, 100000, None)], False),
    (
        "/device:GPU:0",
        "Stream #7",
        [
            ("ncclDevKernel_AllReduce_Sum_f32_RING", 0, 300000, "all-reduce-start.1"),
            ("loop_add_fusion", 400000, 100000, "fusion"),
            ("fusion", 600000, 100000, None),
        ],
        True,
    ),
)
GPU_PROGRAM = hlo(
    "%all-reduce-start.1 = f32[4]{0} all-reduce-start(%fusion), to_apply=%add",
    "ROOT %all-reduce-done.1 = f32[4]{0} all-reduce-done(%all-reduce-start.1)",
)


def test_a_gpu_device_plane_is_read_through_the_hlo_op_stat():
    profile = jax.profiler.ProfileData.from_text_proto(GPU_XSPACE)
    trace = traces.from_profile(profile, Program(GPU_PROGRAM, "gpu"))
    # the kernels' events, by their hlo_op stat; the last event has none and its name
    # ("fusion") is an instruction, so it counts too; the host plane is not read
    assert [(e.name, e.plane) for e in trace.events] == [
        ("all-reduce-start.1", "/device:GPU:0"),
        ("fusion", "/device:GPU:0"),
        ("fusion", "/device:GPU:0"),
    ]
    assert trace.counts() == {"all-reduce": 1}
    assert trace.share() == pytest.approx(0.6)
    device = next(p for p in profile.planes if p.name == "/device:GPU:0")
    names = [traces.instruction_of(e) for line in device.lines for e in line.events]
    assert names == ["all-reduce-start.1", "fusion", "fusion"]


def test_a_device_plane_without_the_programs_events_is_passed_over():
    """A CPU program traced on a machine with one GPU (where the lessons run on CPU
    devices): the GPU's plane holds none of its instructions, so the host's are read;
    with the program's events on the device plane, the host's are not."""
    profile = jax.profiler.ProfileData.from_text_proto(xspace(
        ("/host:CPU", "python", [("all-reduce.1", 0, 300000, None),
                                 ("fusion", 400000, 100000, None)], False),
        ("/device:GPU:0", "Stream #7", [("some_other_kernel", 0, 5, None)], False),
    ))
    trace = traces.from_profile(profile, Program(PROGRAM, "cpu"))
    assert [(e.name, e.plane) for e in trace.events] == [
        ("all-reduce.1", "/host:CPU"), ("fusion", "/host:CPU")]
    gpu = traces.from_profile(jax.profiler.ProfileData.from_text_proto(GPU_XSPACE),
                              Program(GPU_PROGRAM, "gpu"))
    assert {e.plane for e in gpu.events} == {"/device:GPU:0"}
    # a GPU program whose device plane lost its events is not read from the host's
    # launches: its trace is empty, and check() fails
    lost = jax.profiler.ProfileData.from_text_proto(xspace(
        ("/host:CPU", "python", [("all-reduce-start.1", 0, 100000, None)], False),
        ("/device:GPU:0", "Stream #7", [("some_other_kernel", 0, 5, None)], False),
    ))
    assert traces.from_profile(lost, Program(GPU_PROGRAM, "gpu")).events == []
