"""Plots shared by several chapters: who owns which slice, and bytes per device."""
from __future__ import annotations

from typing import Any, Sequence

from .shards import as_jax

__all__ = ["device_colors", "owner_map", "plot_axis_ownership", "round_bytes",
           "round_binary",
           "byte_axis", "legend_outside", "plot_bytes_vs_devices"]


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


def plot_axis_ownership(
    x: Any, axis_labels: Sequence[str] | None = None, ax=None, title: str | None = None
):
    """Draw each axis of ``x`` as a bar, split into the blocks that each device owns.

    A split axis shows one coloured block per owner, named by its devices; an unsplit
    one is a white "whole" block; a block that devices hold identical copies of is
    hatched grey, "copies".

    Long because: one figure, drawn bar by bar, with its three cases (split, whole,
    copies) side by side.
    """
    import matplotlib.pyplot as plt

    arr = as_jax(x)
    colors = device_colors(max(len(arr.sharding.device_set), 1))
    labels = list(axis_labels or [f"axis {i}" for i in range(arr.ndim)])
    # devices that hold the same slice of the whole array are copies
    by_index: dict[tuple, set[int]] = {}
    for s in arr.global_shards:
        key = tuple(ix.indices(dim) for ix, dim in zip(s.index, arr.shape))
        by_index.setdefault(key, set()).add(s.device.id)
    copies_of = {d: len(ids) > 1 for ids in by_index.values() for d in ids}
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.55 * arr.ndim + 0.8))
    for row, axis in enumerate(range(arr.ndim)):
        owners = owner_map(arr, axis)
        n = arr.shape[axis]
        blocks = []
        start = 0
        while start < n:
            stop = start
            while stop < n and owners[stop] == owners[start]:
                stop += 1
            blocks.append((start, stop, owners[start]))
            start = stop
        for k, (start, stop, o) in enumerate(blocks):
            copied = any(copies_of.get(d, False) for d in o)
            hatch = None
            if len(blocks) == 1 and not copied:
                color, text = (1.0, 1.0, 1.0), "whole"
            elif copied:
                color, hatch = (0.8, 0.8, 0.8), "///"
                text = ",".join(map(str, o)) + " copies"
            else:
                color, text = colors[k % len(colors)], ",".join(map(str, o))
            if len(blocks) == 1 and copied:
                text = "whole, copies"
            edge = "0.4" if color == (1.0, 1.0, 1.0) else "white"
            ax.barh(row, (stop - start) / n, left=start / n, color=color,
                    edgecolor=edge, hatch=hatch)
            ax.text((start + stop) / 2 / n, row, text, ha="center", va="center",
                    fontsize=8)
    ax.set_yticks(
        range(arr.ndim), [f"{lab} ({arr.shape[i]})" for i, lab in enumerate(labels)]
    )
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xticks([])
    ax.set_title(
        title or f"which device holds each slice: {arr.dtype}{list(arr.shape)}"
    )
    return ax


_SI = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))


def round_bytes(v: float) -> str:
    """A round label for a byte count at a power of ten: ``1 kB``, ``10 MB``, ``100 B``
    (decimal units, 1 kB = 1000 B; :func:`round_binary` for KiB, MiB)."""
    for size, unit in _SI:
        if v >= size:
            return f"{v / size:g} {unit}"
    return f"{v:g} B"


def byte_axis(ax, axis: str = "y", label: str | None = "bytes per device",
              binary: bool = False) -> None:
    """Make ``axis`` of ``ax`` a log byte axis with round labels at the powers of ten
    inside its limits (``1 kB``, ``10 kB``...), or with ``binary`` at the powers of
    four (``1 KiB``, ``4 KiB``...).  Call it after the data are plotted and limits set.
    """
    import math

    import matplotlib.ticker as mticker

    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    lo = max(lo, 1e-300)
    if binary:
        base, fmt, unit = 4, round_binary, "1 KiB = 1024 B"
    else:
        base, fmt, unit = 10, round_bytes, "1 kB = 1000 B"
    log = math.log10 if base == 10 else (lambda x: math.log(x, base))
    first, last = math.floor(log(lo)), math.ceil(log(hi))
    ticks = [float(base) ** k for k in range(first, last + 1)
             if lo <= float(base) ** k <= hi]
    if not ticks:  # the data span less than one step: one tick at the nearest power
        ticks = [float(base) ** round(log(math.sqrt(lo * hi)))]
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(mticker.FixedLocator(ticks))
    target.set_major_formatter(mticker.FixedFormatter([fmt(t) for t in ticks]))
    target.set_minor_formatter(mticker.NullFormatter())
    if label is not None:
        (ax.set_ylabel if axis == "y" else ax.set_xlabel)(f"{label} ({unit})")


def round_binary(v: float) -> str:
    """A label in binary units for a power of two: ``16 KiB``, ``1 MiB``, ``512 B``."""
    for size, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if v >= size:
            return f"{v / size:g} {unit}"
    return f"{v:g} B"


def legend_outside(ax, **kw) -> None:
    """Put the legend to the right of the axes, off the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              fontsize=kw.pop("fontsize", 8), **kw)


def plot_bytes_vs_devices(
    counts: Sequence[int],
    series: dict[str, Sequence[float]],
    ax=None,
    title: str = "bytes per device",
    predicted: dict[str, Sequence[float]] | None = None,
    binary: bool = False,
):
    """Bytes per device against device count, one line per strategy (log-log).

    ``series`` are measurements (markers); ``predicted`` are model curves, dashed or,
    with ``binary``, wide pale bands (and binary byte units, :func:`byte_axis`).  The
    legend sits right of the axes, off the data.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for i, (name, values) in enumerate(series.items()):
        if binary:   # the prediction as a wide pale band under the measured markers
            line, = ax.plot(counts, values, "o-", ms=5, lw=1.2, label=name, zorder=3)
            if predicted and name in predicted:
                ax.plot(counts, predicted[name], "-", color=line.get_color(), lw=7,
                        alpha=0.25, solid_capstyle="round", zorder=2)
            continue
        line, = ax.plot(counts, values, "o-", label=f"{name} (measured)")
        if predicted and name in predicted:
            ax.plot(
                counts,
                predicted[name],
                "--",
                color=line.get_color(),
                alpha=0.6,
                label=f"{name} (predicted)",
            )
    if binary and predicted:
        ax.plot(
            [], [], "-", color="0.5", lw=7, alpha=0.25, label="pale band: predicted"
        )
        ax.plot([], [], "o-", color="0.3", ms=5, lw=1.2, label="markers: measured")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(counts), [str(c) for c in counts])
    ax.minorticks_off()
    ax.set_xlabel("devices")
    ax.set_yscale("log")
    lo = min(min(v) for v in series.values())
    hi = max(max(v) for v in series.values())
    ax.set_ylim(lo / 2, hi * 2)
    byte_axis(ax, "y", binary=binary)
    ax.set_title(title)
    legend_outside(ax)
    ax.grid(True, which="major", alpha=0.3)
    return ax
