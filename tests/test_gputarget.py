"""Tests of shardbook.gputarget: compiling for 8 x H200 / H100 without a GPU.

The GPU-target compiles run in ONE child process (module fixture), so JAX starts there once.
They need the wheels of ci/requirements-gpu-target.txt in .venv/gpu-target: the test command
installs them first (ci/install_gpu_target).  Without them, those tests are SKIPPED with a
message saying so; the parsing and installer tests always run.
"""
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from shardbook import gputarget as gt
from shardbook import hlo
from shardbook import gputarget_steps as steps

ROOT = Path(__file__).resolve().parents[1]
HAVE_WHEELS = gt.wheels_installed()
needs_wheels = pytest.mark.skipif(
    not HAVE_WHEELS, reason=f"GPU-target wheels not installed in {gt.target_dir()}: run ci/install_gpu_target")

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


def test_missing_wheels_say_what_to_do(tmp_path):
    assert not gt.wheels_installed(tmp_path)
    with pytest.raises(gt.GpuTargetError, match="ci/install_gpu_target"):
        gt.start_jobs([dict(builder=B + "tiny_data_parallel")], path=tmp_path)


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


def test_read_collectives_understands_async_gpu_forms():
    cs = gt.read_collectives(GPU_TEXT)
    got = [(c["op"], c["async"], c["loop"], c["shapes"], c["nbytes"]) for c in cs]
    assert got == [
        ("all-gather", True, 0, ["pred[3360]", "pred[840]"], 4200),   # a combined all-gather: both results
        ("reduce-scatter", True, None, ["f32[8,105]"], 3360),        # the result, not the operand
        ("all-reduce", True, None, ["f32[1217]"], 4868),             # all-reduce-start: results only
        ("collective-permute", True, None, ["f32[4]"], 16),
    ]
    rows = gt.loop_summary(cs)
    assert rows[0] == {"where": "loop 0", "op": "all-gather", "async": True,
                       "shapes": "pred[3360] pred[840]", "count": 1, "bytes": 4200}


def test_read_collectives_agrees_with_hlo_on_cpu():
    """On an XLA:CPU program (no async forms) both readers see the same collectives."""
    rep = gt.compile_here(B + "tiny_data_parallel", text=True)
    mine = [(c["op"], c["per_step"], c["nbytes"]) for c in rep["collectives"]]
    theirs = [(c.op, c.per_step, c.nbytes) for c in hlo.collectives(rep["text"])]
    assert mine == theirs
    steps.check_data_parallel_cpu(rep, grad_bytes=2 * 32 * 32 * 4, loop=False)
    with pytest.raises(AssertionError):  # the CPU program is not the GPU pattern
        steps.check_data_parallel_gpu(rep, grad_bytes=2 * 32 * 32 * 4)


@pytest.fixture(scope="module")
def gpu():
    """One child process, several GPU-target compiles."""
    if not HAVE_WHEELS:
        pytest.skip(f"GPU-target wheels not installed in {gt.target_dir()}: run ci/install_gpu_target")
    jobs = {
        "tiny": dict(builder=B + "tiny_data_parallel"),
        "tiny_replicated": dict(builder=B + "tiny_data_parallel", kwargs={"batch_sharded": False}),
        "tiny_h100": dict(builder=B + "tiny_data_parallel", target="h100_sxm"),
        "tiny_2x8": dict(builder=B + "tiny_data_parallel", hosts=2),
        "dp": dict(builder=B + "rnn_data_parallel"),
        "dp_replicated": dict(builder=B + "rnn_data_parallel", kwargs={"batch_sharded": False}),
        "coba": dict(builder=B + "coba_hh", kwargs={"steps": 10}),
        "coba_resized": dict(builder=B + "coba_hh", kwargs={"steps": 10, "neurons": 4200}),
    }
    results = gt.compile_jobs(list(jobs.values()), timeout=240)
    return dict(zip(jobs, results))


@needs_wheels
def test_tiny_step_gpu_pattern(gpu):
    grads = 2 * 32 * 32 * 4
    for key, what in (("tiny", "8 x NVIDIA H200"), ("tiny_h100", "8 x NVIDIA H100 SXM"),
                      ("tiny_2x8", "16 x NVIDIA H200 (2 hosts)")):
        rep = gpu[key]
        assert rep["target"] == what
        steps.check_data_parallel_gpu(rep, grad_bytes=grads)   # one flat async all-reduce-start
        assert rep["collectives"][0]["shapes"] == [f"f32[{grads // 4}]"]
        m = rep["memory"]
        assert m["arguments"] == 2 * 32 * 32 * 4 + 64 * 32 * 4 // rep["mesh"]["batch"]
        assert m["total"] == m["arguments"] + m["outputs"] - m["aliased"] + m["temporaries"]


@needs_wheels
def test_removing_the_batch_annotation_fails_the_gpu_assert(gpu):
    """The GPU-pattern assert depends on the sharding annotation: replicate the batch and the
    gradient all-reduce disappears, so "one all-reduce-start of all gradients" raises."""
    steps.check_data_parallel_gpu(gpu["dp"], grad_bytes=steps.rnn_grad_bytes(4, 32, 2))
    assert gpu["dp_replicated"]["collectives"] == []
    with pytest.raises(AssertionError, match="expected one collective"):
        steps.check_data_parallel_gpu(gpu["dp_replicated"], grad_bytes=steps.rnn_grad_bytes(4, 32, 2))
    with pytest.raises(AssertionError):
        steps.check_data_parallel_gpu(gpu["tiny_replicated"], grad_bytes=2 * 32 * 32 * 4)


@needs_wheels
def test_coba_one_async_all_gather_and_resizing_is_exact(gpu):
    steps.check_coba_gpu(gpu["coba"], 3360, 840)
    assert len(gpu["coba"]["collectives"]) == 1
    # built at 840 neurons and traced at 4200 = built at 4200: same program, same bytes
    assert gpu["coba_resized"]["memory"] == gpu["coba"]["memory"]
    assert gpu["coba_resized"]["collectives"] == gpu["coba"]["collectives"]


@pytest.mark.skipif(__import__("importlib").util.find_spec("jax_cuda12_plugin") is not None,
                    reason="this environment itself has JAX's CUDA plugin (a GPU install)")
def test_notebook_kernel_never_sees_the_cuda_plugin():
    """A plain `import jax` in this environment, with no environment variables, gets CPU devices
    and no CUDA messages: the wheels live outside sys.path."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    code = ("import jax, importlib.util as u; print(jax.devices()[0].platform, "
            "u.find_spec('jax_plugins') is None, u.find_spec('jax_cuda12_plugin') is None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.split() == ["cpu", "True", "True"], out.stderr[-2000:]
    assert "cuda" not in out.stderr.lower(), out.stderr[-2000:]
