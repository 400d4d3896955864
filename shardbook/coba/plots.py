"""Plots of chapter 4's measurements."""
from __future__ import annotations

__all__ = ["plot_time_model"]


def plot_time_model(curves: dict, ax=None, total_only: bool = False):
    """Predicted time per step against devices (``coba.timemodel.curve`` data, one per
    delivery): the total as a line, each point labelled with its dominant term."""
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
