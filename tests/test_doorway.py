"""The doorway (``shardbook.book``): device setup, chapter configurations, source
regions.

* On a machine with ONE accelerator the lessons still see a split: they run on N
  simulated CPU devices, and only the timings use the accelerator (a stubbed probe
  stands in for the GPU).
* Every chapter configuration divides by its mesh at any device count, and is the
  canonical one at 1 to 8 devices.
* Every source region a notebook shows exists, and region markers are checked.
"""

import math
import re
from dataclasses import dataclass
from pathlib import Path

import jax
import notebooks as nbs  # ci/notebooks.py: conftest.py puts ci/ on the path
import pytest

from shardbook import book

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class FakeAccelerator:
    id: int
    platform: str = "gpu"
    device_kind: str = "NVIDIA T4 (stub)"


@pytest.fixture
def restore_devices():
    before = book.setup_devices(verbose=False)
    yield
    jax.config.update("jax_default_device", None)
    book.setup_devices(verbose=False)
    assert book.devices() == list(before.devices)


def test_one_accelerator_gives_simulated_cpu_devices_for_the_lessons(
    restore_devices, capsys
):
    cpu = jax.devices("cpu")
    gpu = [FakeAccelerator(0)]
    info = book.setup_devices(probe=lambda: (gpu, cpu))
    assert info.devices == tuple(cpu) and info.count == len(cpu) == 4
    assert info.simulated and info.platform == "cpu" and info.split_on_cpu
    assert info.speed_devices == tuple(gpu) and info.speed_platform == "gpu"
    assert book.devices() == cpu and book.speed_devices() == gpu
    # new arrays go where the lessons run
    assert jax.config.jax_default_device == cpu[0]
    printed = capsys.readouterr().out
    assert "lessons on 4 simulated CPU devices" in printed and "timings on 1" in printed
    assert book.config("ch2").n == 4


def test_two_accelerators_are_used_for_everything(restore_devices):
    gpus = [FakeAccelerator(0), FakeAccelerator(1)]
    info = book.setup_devices(probe=lambda: (gpus, jax.devices("cpu")), verbose=False)
    assert info.devices == tuple(gpus) == info.speed_devices and not info.simulated
    assert not info.split_on_cpu and book.config("ch3").n == 2


def test_no_accelerator_uses_the_simulated_devices(restore_devices):
    cpu = jax.devices("cpu")
    info = book.setup_devices(probe=lambda: (cpu, cpu), verbose=False)
    assert info.devices == info.speed_devices == tuple(cpu) and not info.split_on_cpu
    assert str(info) == "4 simulated CPU devices (platform: cpu)"


def test_a_device_count_set_too_late_is_refused(monkeypatch):
    monkeypatch.setenv("BOOK_NUM_DEVICES", "3")  # JAX already runs with 4
    with pytest.raises(book.DeviceSetupError, match="4 CPU device.*3 were requested"):
        book.setup_devices(verbose=False)


# ------------------------------------------------------------------ configurations
SPLIT = {  # configuration -> {size: how many ways it is split on n devices}
    "ch1": {
        "rows": lambda n: n,
        "batch": lambda n: n,
        "time": lambda n: n,
        "square": lambda n: n,
    },
    "ch2": {"B": lambda n: n},
    "ch2b": {"B": lambda n: n},
    "ch2c": {"H_split": lambda n: n},
    "ch3": {
        "H": lambda n: n,
        "B": lambda n: book.mesh_shape_2d(n)[0],
        "H_mem": lambda n: n,
        "B_all": lambda n: n,
    },
    "fsdp": {"B": lambda n: n, "D": lambda n: n},
    "ch4": {"exc": lambda n: n, "inh": lambda n: n},
    "ch4a": {"form_exc": lambda n: n, "form_inh": lambda n: n},
    "ch5a": {"hidden": lambda n: n},
    "ch5b": {"hidden": lambda n: math.lcm(n, max(1, n // 2))},
    "ch5c": {
        "N": lambda n: n,
        "coba_step": lambda n: n,
        "coba_small": lambda n: n,
        "coba_large": lambda n: n,
    },
    "ch7": {"M": lambda n: n, "K": lambda n: n, "N": lambda n: n, "H": lambda n: n,
             "B": lambda n: n},
}


@pytest.mark.parametrize("name", sorted(book.CHAPTERS))
def test_configurations_divide_at_any_device_count(name):
    assert name in SPLIT, f"say how {name}'s sizes are split"
    canonical = book.config(name, 8)
    for n in list(range(1, 9)) + [9, 11, 12, 16, 32, 64]:
        cfg = book.config(name, n)
        for size, ways in SPLIT[name].items():
            assert getattr(cfg, size) % ways(n) == 0, (name, n, size, cfg)
            # a size changes only if it must (COBA-HH scales E and I together)
            if name != "ch4" and getattr(canonical, size) % ways(n) == 0:
                assert getattr(cfg, size) == getattr(canonical, size), (name, n, size)
        for size, value in cfg.values.items():
            if size not in SPLIT[name] and size not in ("mesh_2d", "scale"):
                assert value == getattr(canonical, size), (name, n, size)
    assert book.config("ch3", 32).H == 864 and book.config("ch4", 9).scale == 3


def test_configuration_errors_are_clear():
    with pytest.raises(KeyError, match="no configuration 'ch99'; known: ch1"):
        book.config("ch99")
    with pytest.raises(AttributeError, match="has no size 'Q'; it has B, T"):
        book.config("ch2", 4).Q


# ------------------------------------------------------------------------- regions
def _notebook_code(path: Path) -> str:
    return nbs.code(path)


_NAMED = re.compile(r"\b(?:book\.)?(?:show|region)\(((?:\s*\"[\w.\-]+\"\s*,?)+)")


def test_every_region_a_notebook_shows_exists():
    known = book.regions()
    for path in nbs.notebooks():
        for call in _NAMED.finditer(_notebook_code(path)):
            for name in re.findall(r"\"([\w.\-]+)\"", call.group(1)):
                assert name in known, (
                    f"{path.name} shows region {name!r}, which is gone"
                )


def test_no_notebook_cuts_source_by_string():
    for path in nbs.notebooks():
        code = _notebook_code(path)
        for banned in ("getsource", "excerpt(", "show_source(", "source_section("):
            assert banned not in code, f"{path.name} shows source with {banned}"


def test_region_markers(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "def f():\n    # region: outer\n    x = 1\n    # region: inner\n    y = 2\n"
        "    # endregion\n    return x + y\n    # endregion\n"
    )
    assert book.region("inner", pkg) == "y = 2"
    assert book.region("outer", pkg) == "x = 1\ny = 2\nreturn x + y"
    with pytest.raises(book.RegionError, match="no source region named 'outr'.*outer"):
        book.region("outr", pkg)
    (pkg / "b.py").write_text("# region: open\nx = 1\n")
    with pytest.raises(book.RegionError, match="'open' is never closed"):
        book.regions(pkg)
    (pkg / "b.py").write_text("# region: inner\nx = 1\n# endregion\n")
    with pytest.raises(book.RegionError, match="defined twice"):
        book.regions(pkg)


def test_the_doorway_names_what_it_offers():
    for name in book.__all__:
        assert getattr(book, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'hlo'"):
        getattr(book, "hlo")   # a helper module is imported by name, not through book
    for name in book.MODULES:
        assert (ROOT / "shardbook" / f"{name}.py").exists() or (
            ROOT / "shardbook" / name / "__init__.py").exists(), name
    # and every module of the package is listed there, or is the doorway's own part
    doorway = {"book", "config", "devices", "regions", "gputarget_steps"}
    found = {p.stem for p in (ROOT / "shardbook").glob("*.py") if p.stem != "__init__"}
    found |= {p.parent.name for p in (ROOT / "shardbook").glob("*/__init__.py")}
    assert found == set(book.MODULES) | doorway, found ^ (set(book.MODULES) | doorway)


def test_a_page_that_needs_the_cpu_backend_says_how_to_get_it(monkeypatch):
    """Pages 2c, 4b and 5a compile for XLA:CPU on any machine: without JAX's CPU
    backend (JAX_PLATFORMS=cuda) they stop with what to set, not JAX's own error."""
    assert len(book.cpu_devices()) == len(jax.devices("cpu"))

    def no_cpu(backend=None):
        raise RuntimeError("Unknown backend cpu requested")

    monkeypatch.setattr(jax, "devices", no_cpu)
    with pytest.raises(book.DeviceSetupError, match="JAX_PLATFORMS=cuda,cpu"):
        book.cpu_devices()
