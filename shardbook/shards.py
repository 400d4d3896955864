"""Where does an array live?  Shard tables, bytes per device, and checks.

Everything here reads ``jax.Array``'s shards and ``sharding``, so it works the same for
arrays made by JAX and by BrainPy.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

import numpy as np

__all__ = ["as_jax", "shard_rows", "shard_table", "describe", "bytes_per_device",
           "max_bytes_per_device", "check_tiling", "check_sharding",
           "is_replicated"]


def as_jax(x: Any):
    """The ``jax.Array`` behind ``x`` (a BrainPy Array's ``.value``); else TypeError."""
    import jax

    if isinstance(x, jax.Array):
        return x
    value = getattr(x, "value", None)
    if isinstance(value, jax.Array):
        return value
    raise TypeError(
        f"expected a jax.Array or a brainpy.math.Array, got {type(x).__name__}"
    )


def _fmt_index(index: tuple, shape: tuple) -> str:
    parts = []
    for sl, n in zip(index, shape):
        start, stop, _ = sl.indices(n)
        parts.append(":" if (start, stop) == (0, n) else f"{start}:{stop}")
    return "[" + ", ".join(parts) + "]"


def shard_rows(x: Any, addressable_only: bool = False) -> list[dict]:
    """One row per shard: device id, slices it holds, shard shape and bytes."""
    arr = as_jax(x)
    shards = arr.addressable_shards if addressable_only else arr.global_shards
    rows = []
    for s in shards:
        shape = tuple(len(range(*sl.indices(n))) for sl, n in zip(s.index, arr.shape))
        rows.append(
            dict(
                device=s.device.id,
                index=_fmt_index(s.index, arr.shape),
                shape=shape,
                nbytes=int(np.prod(shape, dtype=np.int64)) * arr.dtype.itemsize,
                replica=s.replica_id,
            )
        )
    return rows


def shard_table(x: Any, addressable_only: bool = False) -> str:
    """A printable table of ``x``'s shards (one line per device)."""
    arr = as_jax(x)
    rows = shard_rows(arr, addressable_only)
    head = f"{'device':>6}  {'slices':<24} {'shard shape':<16} {'bytes':>10}  replica"
    lines = [f"{arr.dtype}{list(arr.shape)}  {describe(arr)}", head]
    for r in rows:
        lines.append(
            f"{r['device']:>6}  {r['index']:<24} {str(r['shape']):<16} "
            f"{r['nbytes']:>10,}  {r['replica']}"
        )
    return "\n".join(lines)


def describe(x: Any) -> str:
    """``NamedSharding`` with its spec, or the sharding's class name."""
    s = as_jax(x).sharding
    spec = getattr(s, "spec", None)
    if spec is not None:
        return f"NamedSharding(mesh={dict(s.mesh.shape)}, spec={spec})"
    return type(s).__name__


def _leaves(xs: Iterable[Any]):
    import jax

    for x in xs:
        for leaf in jax.tree_util.tree_leaves(
            x, is_leaf=lambda v: hasattr(v, "value") and not isinstance(v, jax.Array)
        ):
            yield as_jax(leaf)


def bytes_per_device(*xs: Any) -> dict[int, int]:
    """Bytes the given arrays (or pytrees of them) occupy on each device, by id."""
    import jax

    total: dict[int, int] = defaultdict(int)
    for d in jax.devices():
        total[d.id] = 0
    for arr in _leaves(xs):
        for r in shard_rows(arr):
            total[r["device"]] += r["nbytes"]
    return dict(total)


def max_bytes_per_device(*xs: Any) -> int:
    """The largest per-device footprint: what must fit on the fullest device."""
    return max(bytes_per_device(*xs).values())


def check_tiling(x: Any, expected: Any = None) -> None:
    """Assert that the shards tile ``x`` exactly once per replica, with the right data.

    Give ``expected``, the host data ``x`` was made from, wherever it exists: without
    it the reference is ``np.asarray(x)``, assembled from these same shards, so only
    the coverage is checked."""
    arr = as_jax(x)
    if expected is None:
        whole = np.asarray(arr)
    else:
        whole = np.asarray(getattr(expected, "value", expected))
        if whole.shape != arr.shape:
            raise AssertionError(
                f"array has shape {tuple(arr.shape)}, the host data {whole.shape}")
    cover = np.zeros(arr.shape, dtype=np.int32)
    rebuilt = np.zeros(arr.shape, dtype=arr.dtype)
    replicas = {s.replica_id for s in arr.global_shards}
    for s in arr.global_shards:
        cover[s.index] += 1
        data = np.asarray(s.data)
        if not np.array_equal(data, whole[s.index]):
            raise AssertionError(
                f"shard on device {s.device.id} holds the wrong data for slice "
                f"{_fmt_index(s.index, arr.shape)}")
        if s.replica_id == 0:
            rebuilt[s.index] = data
    # raised, not asserted: a check that python -O would skip proves nothing
    if not (cover == len(replicas)).all():
        raise AssertionError(
            f"shards do not tile the array exactly once per replica: coverage ranges "
            f"{cover.min()}..{cover.max()}, replicas {len(replicas)}")
    if not np.array_equal(rebuilt, whole):
        raise AssertionError("replica-0 shards do not reassemble to the array")


def check_sharding(x: Any, spec: Any, mesh: Any = None) -> None:
    """Assert that ``x`` is laid out as ``NamedSharding(mesh, spec)``.

    ``mesh`` defaults to ``x``'s own.  Compared with ``Sharding.is_equivalent_to``:
    ``P('x')`` matches ``P('x', None)``, and on one device any spec matches, so a
    layout assert proves something only with several devices on the axes it names."""
    from jax.sharding import NamedSharding, PartitionSpec

    arr = as_jax(x)
    if not isinstance(spec, PartitionSpec):
        spec = PartitionSpec(*spec)
    if mesh is None:
        mesh = getattr(arr.sharding, "mesh", None)
        if mesh is None:
            raise AssertionError(
                f"expected a NamedSharding with spec {spec}, got {describe(arr)}"
            )
    want = NamedSharding(mesh, spec)
    if not arr.sharding.is_equivalent_to(want, arr.ndim):
        raise AssertionError(
            f"array {arr.dtype}{list(arr.shape)} is laid out as {describe(arr)}, "
            f"expected {spec} on mesh {dict(mesh.shape)}")


def is_replicated(x: Any) -> bool:
    """True when every device holds the whole array."""
    return as_jax(x).sharding.is_fully_replicated
