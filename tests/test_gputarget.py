"""Tests of shardbook.gputarget: compiling for 8 x H200 / H100 without a GPU.

The GPU-target compiles run in ONE child process (module fixture), so JAX starts there
once.
They need the wheels of ci/requirements-gpu-target.txt in .venv/gpu-target: the test
command
installs them first (ci/install_gpu_target).  Without them, those tests are SKIPPED with
a
message saying so; the parsing and installer tests always run.
"""

import json
import os
from pathlib import Path

import jax
import pyrun  # tests/pyrun.py
import pytest
import shared_compiles as shared

from shardbook import book

gt, hlo, expect = book.gputarget, book.hlo, book.expect

ROOT = Path(__file__).resolve().parents[1]
HAVE_WHEELS = gt.wheels_installed()
needs_wheels = pytest.mark.skipif(
    not HAVE_WHEELS,
    reason=f"GPU-target wheels not installed in {gt.target_dir()}: "
    "run ci/install_gpu_target",
)

B = "shardbook.gputarget_steps:"


def test_pins_match_requirements_file():
    lines = (ROOT / "ci" / "requirements-gpu-target.txt").read_text().splitlines()
    pins = tuple(ln.strip() for ln in lines if ln.strip() and not ln.startswith("#"))
    assert pins == gt.PINS


def test_specs_ship_with_licence_and_source():
    for name in gt.TARGETS:
        text = gt.spec_text(name)
        assert "Licensed under the Apache License, Version 2.0" in text
        assert "Source: openxla/xla, xla/backends/gpu/target_config/specs/" in text
        assert "collective_memory_granularity" not in text.split("gpu_device_info")[1]
        assert "device_memory_size" in text
    assert gt.spec_text("H100") == gt.spec_text("h100_sxm")
    with pytest.raises(ValueError, match="unknown GPU target"):
        gt.spec_text("a100")


def test_missing_wheels_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_GPU_CACHE", "0")   # nothing cached: the wheels are needed
    assert not gt.wheels_installed(tmp_path)
    with pytest.raises(gt.GpuTargetError, match="ci/install_gpu_target"):
        gt.start_jobs([{"builder": B + "tiny_data_parallel"}], path=tmp_path)


def test_cached_jobs_need_no_wheels(tmp_path, monkeypatch):
    """A hosted reader without the wheels still reads the cached programs (page 2c's
    first cell); a job the cache lacks still says what to install."""
    import gzip
    import json

    monkeypatch.setenv("BOOK_GPU_CACHE_DIR", str(tmp_path / "cache"))
    job = {"builder": B + "tiny_data_parallel", "devices": 1}
    program = gt.compile_here(job["builder"], devices=1)   # any Program will do
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{gt.cache_key(job)}.json.gz").write_bytes(
        gzip.compress(json.dumps(program.to_json()).encode()))
    none = tmp_path / "no-wheels"
    [read] = gt.start_jobs([job], path=none).result()
    assert read.memory == program.memory and "cache" in read.meta
    with pytest.raises(gt.GpuTargetError, match="1 of 2 job"):
        gt.start_jobs([job, {**job, "devices": 2}], path=none)


GPU_TEXT = """\
HloModule jit_step

%body (p: (s32[], pred[420])) -> (s32[], pred[420]) {
  %ag-start = ((pred[420]{0}, pred[105]{0}), (pred[3360]{0}, pred[840]{0})) all-gather-start(%a, %b), channel_id=1, dimensions={0}
  %ag-done = (pred[3360]{0}, pred[840]{0}) all-gather-done(%ag-start)
  ROOT %t = (s32[], pred[420]) tuple(%i, %x)
}

%cond (p: (s32[], pred[420])) -> pred[] {
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: f32[8,840]) -> f32[8,105] {
  %w = (s32[], pred[420]) while(%init), condition=%cond, body=%body, metadata={op_name="jit(step)/while"}
  %rs-start = ((f32[8,840]{1,0}), f32[8,105]{1,0}) reduce-scatter-start(%a), channel_id=2, dimensions={1}
  %rs-done = f32[8,105]{1,0} reduce-scatter-done(%rs-start)
  %ar-start = f32[1217]{0} all-reduce-start(%flat), channel_id=3, to_apply=%add
  %ar-done = f32[1217]{0} all-reduce-done(%ar-start)
  %cp-start = (f32[4]{0}, f32[4]{0}, u32[], u32[]) collective-permute-start(%c), channel_id=4
  ROOT %r = f32[8,105]{1,0} copy(%rs-done)
}
"""


def test_program_reads_async_gpu_forms():
    prog = hlo.Program(GPU_TEXT, "gpu")
    got = [
        (c.op, c.async_, c.loop, c.phase, c.shapes, c.nbytes) for c in prog.collectives
    ]
    assert got == [
        (
            "all-gather",
            True,
            0,
            "fwd",
            ("pred[3360]", "pred[840]"),
            4200,
        ),  # both results
        (
            "reduce-scatter",
            True,
            None,
            "once",
            ("f32[8,105]",),
            3360,
        ),  # not the operand
        ("all-reduce", True, None, "once", ("f32[1217]",), 4868),  # results only
        ("collective-permute", True, None, "once", ("f32[4]",), 16),
    ]
    assert prog.rows()[0] == {
        "where": "loop 0",
        "op": "all-gather",
        "async_": True,
        "shapes": "pred[3360] pred[840]",
        "count": 1,
        "bytes": 4200,
        "shown": "pred[3360] pred[840]",
    }
    assert [(w.body, w.known_trip_count) for w in prog.whiles] == [("body", None)]
    with pytest.raises(ValueError, match="no known trip count"):
        prog.traffic()
    assert prog.traffic(10) == (10 + 3, 42000 + 3360 + 4868 + 16)


def test_a_compiled_program_travels_as_json():
    """What the child sends back is what the parent reads: the same Program."""
    prog = shared.here("tiny_data_parallel")
    assert prog.compiler == "cpu" and prog.devices == jax.device_count()
    assert prog.meta["target"].endswith("(this process)")
    for text in (True, False):
        back = hlo.Program.from_json(json.loads(json.dumps(prog.to_json(text=text))))
        assert (back.compiler, back.devices, back.memory) == (
            prog.compiler,
            prog.devices,
            prog.memory,
        )
        assert back.collectives == prog.collectives and back.whiles == prog.whiles
        assert back.table() == prog.table() and back.traffic(3) == prog.traffic(3)
        assert back.constants(0) == prog.constants(0)


JOBS = {  # what depends on the target; the table's entries: tests/test_expect.py
    "tiny": shared.register("tiny_data_parallel"),
    "tiny_replicated": shared.register("tiny_data_parallel", {"batch_sharded": False}),
    "tiny_h100": shared.register("tiny_data_parallel", target="h100_sxm"),
    "tiny_2x8": shared.register("tiny_data_parallel", hosts=2),
    "dp_replicated": shared.register("rnn_data_parallel", {"batch_sharded": False}),
    "coba": shared.register("coba_hh", {"steps": 10}),
    "coba_resized": shared.register("coba_hh", {"steps": 10, "neurons": 4200}),
}


@pytest.fixture(scope="module")
def gpu():
    """One child process for every GPU-target compile of the session."""
    return shared.gpu_programs(JOBS)


@needs_wheels
def test_tiny_step_on_every_target(gpu):
    grads = 2 * 32 * 32 * 4
    for key, what in (
        ("tiny", "8 x NVIDIA H200"),
        ("tiny_h100", "8 x NVIDIA H100 SXM"),
        ("tiny_2x8", "16 x NVIDIA H200 (2 hosts)"),
    ):
        prog = gpu[key]
        assert prog.meta["target"] == what and prog.compiler == "gpu"
        print(
            expect.check("tiny.dp", prog, grad_bytes=grads)
        )  # one flat async all-reduce
        m = prog.memory
        assert (
            m["arguments"]
            == 2 * 32 * 32 * 4 + 64 * 32 * 4 // prog.meta["mesh"]["batch"]
        )
        assert (
            m["total"]
            == m["arguments"] + m["outputs"] - m["aliased"] + m["temporaries"]
        )


@needs_wheels
def test_removing_the_batch_annotation_fails_the_gpu_expectation(gpu):
    """The GPU entry depends on the sharding annotation: replicate the batch and the
    gradient all-reduce disappears, so "one all-reduce of all gradients" raises."""
    assert gpu["dp_replicated"].collectives == ()
    with pytest.raises(AssertionError, match="missing: all-reduce async f32"):
        expect.check("rnn.dp", gpu["dp_replicated"], grad_bytes=4 * (4 + 32 + 2) * 32)
    with pytest.raises(AssertionError, match="xla:gpu tiny.dp"):
        expect.check("tiny.dp", gpu["tiny_replicated"], grad_bytes=2 * 32 * 32 * 4)


@needs_wheels
def test_resizing_a_coba_compile_is_exact(gpu):
    """Built at 840 neurons and traced at 4200 = built at 4200: same program, same
    bytes."""
    print(expect.check("coba.step", gpu["coba"], exc=3360, inh=840))
    assert gpu["coba_resized"].memory == gpu["coba"].memory
    assert gpu["coba_resized"].collectives == gpu["coba"].collectives


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("jax_cuda12_plugin") is not None,
    reason="this environment itself has JAX's CUDA plugin (a GPU install)",
)
def test_notebook_kernel_never_sees_the_cuda_plugin():
    """A plain `import jax` in this environment, with no environment variables, gets CPU
    devices
    and no CUDA messages: the wheels live outside sys.path."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    code = (
        "import jax, importlib.util as u; print(jax.devices()[0].platform, "
        "u.find_spec('jax_plugins') is None, u.find_spec('jax_cuda12_plugin') is None)"
    )
    out = pyrun.python("-c", code, env=env)
    assert out.stdout.split() == ["cpu", "True", "True"], out.stderr[-2000:]
    assert "cuda" not in out.stderr.lower(), out.stderr[-2000:]


# ------------------------------------------------------------------ the compile cache
@needs_wheels
def test_a_cached_program_is_the_fresh_compile(tmp_path, monkeypatch):
    """The cache gives back what the child compiled, says so, and a job that differs
    in anything (here its sizes) misses it and compiles anew."""
    monkeypatch.setenv("BOOK_GPU_CACHE_DIR", str(tmp_path))
    job = {"builder": B + "tiny_data_parallel", "kwargs": {}, "devices": 2}
    (fresh,) = gt.compile_jobs([job], timeout=300)
    assert "cache" not in fresh.meta and len(list(tmp_path.glob("*.json.gz"))) == 1
    (again,) = gt.compile_jobs([job], timeout=300)
    assert again.meta["cache"].startswith("read from ")
    assert again.meta["child_s"] == 0.0 and fresh.meta["child_s"] > 0  # chapter 6 reads it
    assert (again.text, again.memory, again.collectives) == (
        fresh.text,
        fresh.memory,
        fresh.collectives,
    )
    other = {**job, "devices": 4}
    assert gt.cache_key(other) != gt.cache_key(job)
    (four,) = gt.compile_jobs([other], timeout=300)
    assert "cache" not in four.meta and four.devices == 4


def test_the_cache_key_covers_the_source_and_flags(monkeypatch):
    job = {"builder": B + "tiny_data_parallel", "kwargs": {}}
    key = gt.cache_key(job)
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_latency_hiding_scheduler=false")
    assert gt.cache_key(job) != key
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=SSE4_2")  # the portability gate
    assert gt.cache_key(job) == key
    cpu_job = {**job, "target": "cpu"}  # an XLA:CPU job: the ISA is part of its key
    assert gt.cache_key(cpu_job) != gt.cache_key(job)
    isa = gt.cache_key(cpu_job)
    monkeypatch.delenv("XLA_FLAGS")
    assert gt.cache_key(cpu_job) != isa
    monkeypatch.setattr(gt, "source_digest", lambda: "an edited package")
    assert gt.cache_key(job) != key
    monkeypatch.setenv("BOOK_GPU_CACHE", "0")
    assert gt.cache_load(job) is None


def test_prune_drops_entries_of_another_source(tmp_path):
    import gzip
    import json

    old = {"meta": {"source": "0" * 12}}
    (tmp_path / "old.json.gz").write_bytes(gzip.compress(json.dumps(old).encode()))
    now = {"meta": {"source": gt.source_digest()[:12]}}
    (tmp_path / "now.json.gz").write_bytes(gzip.compress(json.dumps(now).encode()))
    assert gt.prune_cache(tmp_path) == 1
    assert [f.name for f in tmp_path.iterdir()] == ["now.json.gz"]
