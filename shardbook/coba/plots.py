"""Plots of chapter 4's measurements."""
from __future__ import annotations


def plot_scaling(data: dict, axes=None):
    """Steady-state time per simulated second and peak memory per device against
    neurons."""
    import matplotlib.pyplot as plt

    runs = sorted(data["runs"], key=lambda r: r["neurons"])
    prov = data["provenance"]
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    n = [r["neurons"] for r in runs]
    axes[0].loglog(
        n, [r["steady_s_per_sim_s"] for r in runs], "o-", label="steady state"
    )
    axes[0].loglog(n, [r["compile_s"] for r in runs], "s--", label="compilation (once)")
    axes[0].set_ylabel("seconds per simulated second")
    axes[0].legend(fontsize=8)
    peak = [r["peak_bytes_in_use"] for r in runs]
    if all(p is not None for p in peak):
        axes[1].loglog(n, peak, "o-", label="measured peak (memory_stats)")
    axes[1].loglog(
        n,
        [r["predicted_peak_bytes_per_device"] for r in runs],
        "--",
        label="ledger prediction",
    )
    axes[1].set_ylabel("bytes per device")
    axes[1].legend(fontsize=8)
    what = f"{prov['device_count']} x {prov['device_kind']}" + (
        " (simulated CPU)" if prov["simulated"] else ""
    )
    for ax in axes:
        ax.set_xlabel("neurons")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(what, fontsize=9)
    return axes



def plot_time_model(curves: dict, ax=None, total_only: bool = False):
    """Predicted time per step against devices (``coba.timemodel.curve`` data, one per
    delivery): the total as a line, each range shaded by its dominant term."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.8))
    styles = ("o-", "s--", "^-.", "d:")
    for (name, c), style in zip(curves.items(), styles):
        n = [r["devices"] for r in c["rows"]]
        total = [r["total_s"] * 1e6 for r in c["rows"]]
        line, = ax.loglog(n, total, style, label=f"{name} (total)")
        if total_only:
            continue
        for r, x, y in zip(c["rows"], n, total):
            ax.annotate(r["dominant"].split(",")[0].split(" ")[0], (x, y), fontsize=6,
                        textcoords="offset points", xytext=(0, 5), ha="center",
                        color=line.get_color())
    ax.set_xlabel("GPUs")
    ax.set_ylabel("predicted time per step (us)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
