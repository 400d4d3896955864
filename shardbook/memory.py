"""Memory ledgers: predict bytes per device, then compare with what XLA reports.

``compiled.memory_analysis()`` describes the program *one* device runs, after
partitioning: its arguments, outputs and temporaries in bytes.  Compare it with a
prediction from bytes per neuron, per synapse, per parameter.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GiB", "MiB", "compiled_memory", "device_memory_stats", "fmt_bytes",
           "Ledger", "largest_fitting"]

GiB = 2**30
MiB = 2**20


def compiled_memory(compiled) -> dict[str, int]:
    """Per-device bytes of a compiled program: arguments, outputs, aliased,
    temporaries, code and total."""
    m = compiled.memory_analysis()
    out = dict(
        arguments=int(m.argument_size_in_bytes),
        outputs=int(m.output_size_in_bytes),
        aliased=int(m.alias_size_in_bytes),
        temporaries=int(m.temp_size_in_bytes),
        code=int(m.generated_code_size_in_bytes),
    )
    # outputs that alias (donated) arguments take no extra space
    out["total"] = (
        out["arguments"] + out["outputs"] - out["aliased"] + out["temporaries"]
    )
    return out


def fmt_bytes(n: float) -> str:
    """Human-readable bytes (powers of 1024)."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{int(n):,} B"


@dataclass
class Ledger:
    """Rows of (item, predicted bytes, measured bytes, rtol).

    ``check()`` raises ``AssertionError`` naming every row whose measurement misses
    its prediction: a notebook states a memory model and proves it in one cell."""

    title: str = "bytes per device"
    rows: list = field(default_factory=list)

    def add(
        self, item: str, predicted: float, measured: float, rtol: float = 0.01
    ) -> "Ledger":
        self.rows.append((item, float(predicted), float(measured), float(rtol)))
        return self

    def __str__(self) -> str:
        w = max([len(r[0]) for r in self.rows] + [4])
        lines = [
            self.title,
            f"{'item':<{w}}  {'predicted':>14}  {'measured':>14}  {'ratio':>6}",
        ]
        for item, p, m, _ in self.rows:
            ratio = m / p if p else float("nan") if m else 1.0
            lines.append(
                f"{item:<{w}}  {fmt_bytes(p):>14}  {fmt_bytes(m):>14}  {ratio:>6.3f}"
            )
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(str(self))

    def check(self) -> "Ledger":
        bad = [
            f"{item}: predicted {fmt_bytes(p)}, measured {fmt_bytes(m)} (rtol {rtol})"
            for item, p, m, rtol in self.rows
            if abs(m - p) > rtol * max(abs(p), 1.0)
        ]
        if bad:   # raised, not asserted: python -O would skip an assert
            raise AssertionError("memory model disagrees with measurement:\n  "
                                 + "\n  ".join(bad))
        return self


def largest_fitting(
    bytes_for_size, memory_bytes: float, hi: int = 1 << 40, step: int = 1
) -> int:
    """Largest multiple ``n`` of ``step`` with ``bytes_for_size(n) <= memory_bytes``.

    ``bytes_for_size`` must be non-decreasing.  Returns 0 if not even ``step`` fits."""
    if bytes_for_size(step) > memory_bytes:
        return 0
    lo_k, hi_k = 1, max(1, hi // step)
    while bytes_for_size(hi_k * step) <= memory_bytes and hi_k < (1 << 62) // step:
        hi_k *= 2
    while lo_k < hi_k:
        mid = (lo_k + hi_k + 1) // 2
        if bytes_for_size(mid * step) <= memory_bytes:
            lo_k = mid
        else:
            hi_k = mid - 1
    return lo_k * step


def device_memory_stats(devices) -> list[dict] | None:
    """Each device's ``memory_stats()``, or ``None`` where the platform keeps none.

    XLA:CPU devices keep none and accelerators do; a platform that does otherwise
    raises ``AssertionError``, so a page never silently skips them."""
    stats = [d.memory_stats() for d in devices]
    keeps = None not in stats
    platform = devices[0].platform
    if keeps == (platform == "cpu"):
        raise AssertionError(f"{platform} devices keep {'' if keeps else 'no '}memory "
                             "statistics, unlike what the book expects of them")
    return stats if keeps else None
