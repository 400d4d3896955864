"""An interactive sharding explorer: choose a shape, a mesh and a PartitionSpec, and see
where the array's shards land (chapter 1).

:func:`explore` places a small array with ``jax.device_put`` and returns the shard
table, checked against the spec, or what is wrong and how to fix it: a choice that does
not divide is refused, never replicated silently.  :func:`widget`: its ipywidgets form.
"""
from __future__ import annotations

import ast
import html
import math
import re
import textwrap
from typing import Any, Mapping, Sequence

import numpy as np

from . import shards
from .devices import lesson_devices, mesh_shape_2d

__all__ = ["explore", "default_choice", "expected_slices", "place", "parse_shape",
           "parse_mesh", "parse_spec", "widget", "ExplorerError"]


class ExplorerError(ValueError):
    """A text box's value that the explorer cannot read."""


def default_choice(n: int | None = None) -> dict:
    """A choice that divides at any device count ``n``: a 2-D mesh of ``n`` devices
    (``mesh_shape_2d``) and a float32 array whose dimensions its axes divide."""
    n = len(lesson_devices()) if n is None else n
    rows, cols = mesh_shape_2d(n)
    return dict(shape=(8 * rows, 2 * cols), mesh={"batch": rows, "neuron": cols},
                spec=("batch", "neuron"))


def _spec_entries(spec: Any) -> tuple:
    return tuple(spec)   # a PartitionSpec is a tuple of entries


def _axes_of(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _fmt_mesh(mesh: Mapping[str, int]) -> str:
    return " x ".join(f"{name}={size}" for name, size in mesh.items())


def _fmt_spec(spec: Sequence) -> str:
    return "P(" + ", ".join(repr(tuple(e)) if isinstance(e, (tuple, list)) else repr(e)
                            for e in spec) + ")"


def _problem(shape: tuple, mesh: Mapping[str, int], spec: tuple, n: int) -> str | None:
    """What makes the choice impossible, and how to fix it; None if it can be placed."""
    size = math.prod(mesh.values())
    if any(s < 1 for s in mesh.values()):
        return "every mesh axis needs a size of at least 1."
    if size > n:
        return (f"the mesh {_fmt_mesh(mesh)} needs {size} devices, but this page has "
                f"{n}.\nFix: choose axis sizes whose product is at most {n}.")
    if len(spec) > len(shape):
        return (f"the spec {_fmt_spec(spec)} has {len(spec)} entries, but the array "
                f"has only {len(shape)} dimensions.\n"
                f"Fix: one entry per dimension at most.")
    used: list[str] = []
    for entry in spec:
        for name in _axes_of(entry):
            if name not in mesh:
                return (f"the spec names the axis {name!r}, which is not in the mesh "
                        f"(its axes: {', '.join(mesh)}).\nFix: use one of those names,"
                        f" or add {name!r} to the mesh.")
            if name in used:
                return (f"the spec uses the axis {name!r} twice; an axis splits one "
                        f"dimension only.\nFix: name it once.")
            used.append(name)
    for dim, (length, entry) in enumerate(zip(shape, spec)):
        axes = _axes_of(entry)
        ways = math.prod(mesh[a] for a in axes)
        if length % ways:
            which = (f"axis {axes[0]!r}" if len(axes) == 1 else
                     "axes " + " x ".join(f"{a!r} ({mesh[a]})" for a in axes))
            up = -(-length // ways) * ways
            verb = "s" if len(axes) == 1 else ""
            return (f"dimension {dim} has {length} elements, which do not split into "
                    f"{ways} equal blocks: mesh {which} spread{verb} it over "
                    f"{ways} devices.\n"
                    f"Fix: make dimension {dim} a multiple of {ways} (pad {length} to "
                    f"{up}), split it over an axis that divides {length}, or leave it "
                    f"whole (None).")
    return None


def expected_slices(shape: Sequence[int], mesh: Mapping[str, int],
                    spec: Sequence) -> dict[int, tuple[tuple[int, int], ...]]:
    """Each mesh position's slice, from the spec alone: ``{position: ((start, stop),
    ...)}``, positions row-major over the mesh axes.  Of a dimension split over axes
    ``(a, b)``, the device at ``(i_a, i_b)`` holds block ``i_a * size(b) + i_b`` (the
    JAX docs' rule: the first named axis is the major one)."""
    names, sizes = list(mesh), list(mesh.values())
    spec = list(spec) + [None] * (len(shape) - len(spec))
    out = {}
    for pos, coords in enumerate(np.ndindex(*sizes)):
        at = dict(zip(names, coords))
        bounds = []
        for length, entry in zip(shape, spec):
            axes = _axes_of(entry)
            ways = math.prod(mesh[a] for a in axes)
            block = 0
            for a in axes:
                block = block * mesh[a] + at[a]
            step = length // ways
            bounds.append((block * step, (block + 1) * step))
        out[pos] = tuple(bounds)
    return out


def _check(arr, shape, mesh, spec, devices, itemsize) -> int:
    """Assert every device's slice and bytes against the spec; the bytes per device."""
    want = expected_slices(shape, mesh, spec)
    by_device = {d.id: pos for pos, d in enumerate(devices)}
    ways = math.prod(mesh[a] for e in spec for a in _axes_of(e))
    per_device = math.prod(shape) * itemsize // ways
    seen = set()
    for s in arr.global_shards:
        got = tuple(sl.indices(n)[:2] for sl, n in zip(s.index, shape))
        expect = want[by_device[s.device.id]]
        if got != expect:   # raised, not asserted: python -O would skip an assert
            raise AssertionError(f"device {s.device.id} holds {got}, the spec "
                                 f"{_fmt_spec(spec)} gives it {expect}")
        seen.add(s.device.id)
    if seen != set(by_device):
        raise AssertionError(f"shards on {sorted(seen)}, mesh {sorted(by_device)}")
    measured = shards.bytes_per_device(arr)
    if any(measured[d] != per_device for d in by_device):
        raise AssertionError(
            f"bytes per device {measured}, the spec predicts {per_device:,}")
    return per_device


def _refusal(head: str, problem: str, *notes: str) -> str:
    lines = [head]
    for part in f"cannot be placed: {problem}".split("\n") + list(notes):
        lines.append(textwrap.fill(part, width=88, subsequent_indent="    "))
    return "\n".join(lines)


def place(host, sharding):
    """The explorer's one placement: host data onto the mesh (a test plants a silently
    replicating placement here, which ``explore`` must refuse)."""
    import jax

    return jax.device_put(host, sharding)


def explore(shape: Sequence[int], mesh: Mapping[str, int], spec: Any = (),
            dtype: str = "float32", devices: Sequence | None = None) -> str:
    """The explorer's text for one choice: the checked shard table, or what went wrong.

    ``mesh``: axis name -> size, in order, over the first devices (their product at
    most the device count); ``spec``: a ``PartitionSpec`` or its entries (a name, a
    tuple of names, or None per dimension).
    """
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = list(lesson_devices() if devices is None else devices)
    shape, mesh = tuple(int(s) for s in shape), dict(mesh)
    spec = _spec_entries(spec)
    head = (f"{dtype}{list(shape)} on the mesh {_fmt_mesh(mesh)} with "
            f"{_fmt_spec(spec)}")
    problem = _problem(shape, mesh, spec, len(devices))
    size = math.prod(mesh.values())
    if problem is not None and not 1 <= size <= len(devices):
        return _refusal(head, problem)
    used = devices[:size]
    host = np.arange(math.prod(shape), dtype=dtype).reshape(shape)
    try:
        jmesh = Mesh(np.array(used).reshape(tuple(mesh.values())), tuple(mesh))
        arr = place(host, NamedSharding(jmesh, PartitionSpec(*spec)))
    except Exception as err:   # IndivisibleError, DuplicateSpecError, ValueError
        if problem is None:
            raise
        return _refusal(head, problem, f"(jax.device_put refuses it too, with "
                                       f"{type(err).__name__})")
    if problem is not None:
        raise AssertionError(f"JAX placed a choice the explorer refuses: {problem}")
    per_device = _check(arr, shape, mesh, spec, used, host.dtype.itemsize)
    shards.check_tiling(arr, host)
    copies = len(used) * per_device // host.nbytes
    return "\n".join([
        head, shards.shard_table(arr),
        f"checked: every device holds the slice the spec gives it, {per_device:,} B "
        f"of {host.nbytes:,} B ({copies} cop{'y' if copies == 1 else 'ies'} in all)"])


# ---- the widget's text boxes -------------------------------------------------------

def parse_shape(text: str) -> tuple[int, ...]:
    """``"16, 8"`` -> ``(16, 8)``."""
    parts = [p for p in re.split(r"[,\sx×()]+", text) if p]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ExplorerError(f"a shape is positive integers, such as '16, 8'; "
                            f"got {text!r}")
    return tuple(int(p) for p in parts)


def parse_mesh(text: str) -> dict[str, int]:
    """``"batch=2, neuron=4"`` -> ``{"batch": 2, "neuron": 4}``."""
    items = [p.strip() for p in text.split(",") if p.strip()]
    mesh = {}
    for item in items:
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*[=:]\s*(\d+)", item)
        if m is None or m.group(1) in mesh:
            raise ExplorerError(f"a mesh is name=size pairs, such as "
                                f"'batch=2, neuron=4'; got {text!r}")
        mesh[m.group(1)] = int(m.group(2))
    if not mesh:
        raise ExplorerError(f"a mesh needs at least one axis, such as 'batch=2'; got "
                            f"{text!r}")
    return mesh


def parse_spec(text: str) -> tuple:
    """``"batch, None"``, ``"P('batch', None)"`` or ``"(batch, neuron)"``: entries."""
    body = text.strip()
    if body.startswith("P(") and body.endswith(")"):
        body = body[2:-1]
    if not body.strip():
        return ()
    quoted = re.sub(r"(?<!['\"\w])([A-Za-z_]\w*)(?!['\"\w])",
                    lambda m: m.group(1) if m.group(1) == "None" else repr(m.group(1)),
                    body)
    try:
        value = ast.literal_eval(f"({quoted},)")
    except (ValueError, SyntaxError):
        raise ExplorerError(f"a spec is names, None or (tuples of names), such as "
                            f"'batch, None'; got {text!r}") from None
    ok = all(e is None or isinstance(e, str)
             or (isinstance(e, tuple) and all(isinstance(a, str) for a in e))
             for e in value)
    if not ok:
        raise ExplorerError(f"a spec is names, None or (tuples of names); got {text!r}")
    return tuple(value)


def _explore_text(shape: str, mesh: str, spec: str) -> str:
    try:
        return explore(parse_shape(shape), parse_mesh(mesh), parse_spec(spec))
    except ExplorerError as err:
        return f"cannot read the choice: {err}"


def widget(choice: Mapping | None = None):
    """The explorer as ipywidgets: shape, mesh and spec boxes over ``explore``."""
    import ipywidgets as widgets

    choice = dict(choice or default_choice())
    n = len(lesson_devices())
    meshes = [f"batch={r}, neuron={n // r}" for r in range(1, n + 1) if n % r == 0]
    boxes = dict(
        shape=widgets.Text(", ".join(map(str, choice["shape"])), description="shape"),
        mesh=widgets.Combobox(value=", ".join(f"{k}={v}" for k, v in
                                              choice["mesh"].items()),
                              options=[f"batch={n}", *meshes], description="mesh"),
        spec=widgets.Combobox(value=_fmt_spec(choice["spec"]), description="spec",
                              options=["P('batch', 'neuron')", "P('batch')",
                                       "P(None, 'neuron')", "P(('batch', 'neuron'))",
                                       "P()"]),
    )
    for box in boxes.values():
        box.continuous_update = False   # update on Enter or leaving the box
    shown = widgets.HTML()

    def refresh(_=None):
        text = _explore_text(*(b.value for b in boxes.values()))
        shown.value = f"<pre>{html.escape(text)}</pre>"

    for box in boxes.values():
        box.observe(refresh, names="value")
    refresh()
    return widgets.VBox([widgets.HBox(list(boxes.values())), shown])
