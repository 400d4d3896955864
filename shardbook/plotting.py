"""Plots shared by several chapters: who owns which slice, and bytes per device."""
from __future__ import annotations

from typing import Any, Sequence

from .shards import as_jax


def device_colors(n: int):
    """One colour per device id, the same in every chapter."""
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def owner_map(x: Any, axis: int) -> list[list[int]]:
    """For each index along ``axis``, the sorted device ids that hold it."""
    arr = as_jax(x)
    owners: list[set[int]] = [set() for _ in range(arr.shape[axis])]
    for s in arr.global_shards:
        for i in range(*s.index[axis].indices(arr.shape[axis])):
            owners[i].add(s.device.id)
    return [sorted(o) for o in owners]


def plot_axis_ownership(x: Any, axis_labels: Sequence[str] | None = None, ax=None, title: str | None = None):
    """Draw each axis of ``x`` as a bar, split into the blocks that each device owns.

    Works for any number of dimensions, e.g. (batch, time, neuron).  A block held by
    all devices (replicated along that axis) is drawn grey and labelled "all".
    """
    import jax
    import matplotlib.pyplot as plt

    arr = as_jax(x)
    ndev = jax.device_count()
    colors = device_colors(ndev)
    labels = list(axis_labels or [f"axis {i}" for i in range(arr.ndim)])
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.55 * arr.ndim + 0.8))
    for row, axis in enumerate(range(arr.ndim)):
        owners = owner_map(arr, axis)
        n = arr.shape[axis]
        start = 0
        while start < n:
            stop = start
            while stop < n and owners[stop] == owners[start]:
                stop += 1
            o = owners[start]
            everyone = len(o) == ndev and ndev > 1 or len(o) > 1
            color = (0.8, 0.8, 0.8) if everyone else colors[o[0]]
            ax.barh(row, (stop - start) / n, left=start / n, color=color, edgecolor="white")
            text = "all" if len(o) == ndev else ",".join(map(str, o))
            ax.text((start + stop) / 2 / n, row, text, ha="center", va="center", fontsize=8)
            start = stop
    ax.set_yticks(range(arr.ndim), [f"{lab} ({arr.shape[i]})" for i, lab in enumerate(labels)])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xticks([])
    ax.set_title(title or f"which device holds each slice: {arr.dtype}{list(arr.shape)}")
    return ax


def plot_bytes_vs_devices(
    counts: Sequence[int], series: dict[str, Sequence[float]], ax=None, title: str = "bytes per device",
    predicted: dict[str, Sequence[float]] | None = None,
):
    """Bytes per device against device count, one line per strategy (log-log).

    ``series`` are measurements (markers); ``predicted`` are model curves (dashed).
    """
    import matplotlib.pyplot as plt

    from .memory import fmt_bytes

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for i, (name, values) in enumerate(series.items()):
        line, = ax.plot(counts, values, "o-", label=f"{name} (measured)")
        if predicted and name in predicted:
            ax.plot(counts, predicted[name], "--", color=line.get_color(), alpha=0.6, label=f"{name} (predicted)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(counts), [str(c) for c in counts])
    ax.set_xlabel("devices")
    ax.set_ylabel("bytes per device")
    yt = ax.get_yticks()
    ax.set_yticks(yt, [fmt_bytes(v) for v in yt])
    lo = min(min(v) for v in series.values())
    hi = max(max(v) for v in series.values())
    ax.set_ylim(lo / 2, hi * 2)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return ax
