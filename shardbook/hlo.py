"""Read the collectives and constants out of a compiled XLA program.

``jax.jit(f).lower(*args).compile().as_text()`` is the optimized, partitioned HLO
that every device runs (JAX docs, "Ahead-of-time lowering and compilation").  Each
collective is one instruction there, for example::

    %all-reduce.5 = f32[16,16]{1,0} all-reduce(%dot.13), channel_id=2, ...

A loop (``jax.lax.scan``, ``bm.for_loop``, ``DSTrainer.predict``) becomes a ``while``
instruction whose ``body=`` computation runs once per time step, so collectives in a
loop body are *per step* and collectives elsewhere are *per call*.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")

_DTYPE_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
}
_COMP_RE = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s+->\s+.*\{\s*$")
_INSTR_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s+=\s+(.+?)\s+([a-z][\w\-]*)\((.*)$")
_SHAPE_RE = re.compile(r"\b(pred|[sufc]\d+|bf16)\[([\d,]*)\]")


def _shape_bytes(type_str: str) -> tuple[list[tuple[str, tuple[int, ...]]], int]:
    shapes, total = [], 0
    for dtype, dims in _SHAPE_RE.findall(type_str):
        dims_t = tuple(int(d) for d in dims.split(",") if d)
        shapes.append((dtype, dims_t))
        total += int(np.prod(dims_t, dtype=np.int64)) * _DTYPE_BYTES.get(dtype, 4)
    return shapes, total


@dataclass(frozen=True)
class Collective:
    op: str                 # "all-reduce", "all-gather", ... (async "-start" variants folded in)
    computation: str        # the HLO computation it sits in
    per_step: bool          # True when that computation is the body of a while loop
    shapes: tuple           # ((dtype, dims), ...) of its result, per device
    nbytes: int             # bytes of its result on one device

    def __str__(self) -> str:
        shp = ", ".join(f"{d}[{','.join(map(str, s))}]" for d, s in self.shapes)
        where = "per loop step" if self.per_step else "once per call"
        return f"{self.op:<18} {shp:<28} {self.nbytes:>10,} B  {where}"


def _text(compiled_or_text) -> str:
    if isinstance(compiled_or_text, str):
        return compiled_or_text
    return compiled_or_text.as_text()


def _loop_bodies(text: str) -> set[str]:
    """Names of computations that run once per while-loop iteration (also nested callees)."""
    bodies = set(re.findall(r"body=%?([\w.\-]+)", text))
    # computations called from a loop body (fusions, calls) also run per iteration
    calls: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        m = _COMP_RE.match(line)
        if m:
            current = m.group(1)
            calls[current] = set()
            continue
        if current:
            calls[current].update(re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", line))
    stack, seen = list(bodies), set(bodies)
    while stack:
        for callee in calls.get(stack.pop(), ()):
            if callee not in seen:
                seen.add(callee)
                stack.append(callee)
    return seen


def _split_top(s: str) -> list[str]:
    """Split ``s`` at commas that are not inside (), [] or {}."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _elements(type_str: str) -> list[str]:
    t = type_str.strip()
    if t.startswith("(") and t.endswith(")"):
        return _split_top(t[1:-1])
    return [t]


def _result_type(op: str, type_str: str) -> str:
    """The part of an instruction's type that is the collective's *result*.

    ``all-gather-start``, ``reduce-scatter-start``, ``all-to-all-start`` and
    ``collective-permute-start`` return ``(operands, results[, context])``; ``all-reduce-start``
    returns the results only (XLA's HLO verifier, ``xla/service/hlo_verifier.cc``).
    """
    if op.endswith("-start") and op != "all-reduce-start":
        parts = _elements(type_str)
        return parts[1] if len(parts) >= 2 else parts[0]
    return type_str


def iter_collectives(text: str):
    """``(computation, op, is_async_start, shapes, nbytes)`` for each collective line.

    ``op`` has any ``-start`` folded in.  An async start (XLA:GPU) returns
    ``(operands, results[, context])``: the bytes are those of the results, all of them
    when several collectives were combined into one.
    """
    current = "?"
    for line in text.splitlines():
        m = _COMP_RE.match(line)
        if m:
            current = m.group(1)
            continue
        m = _INSTR_RE.match(line)
        if not m:
            continue
        type_str, op = m.group(2), m.group(3)
        base = op[: -len("-start")] if op.endswith("-start") else op
        if base not in COLLECTIVES:
            continue
        shapes, nbytes = _shape_bytes(_result_type(op, type_str))
        yield current, base, op.endswith("-start"), shapes, nbytes


def collectives(compiled_or_text) -> list[Collective]:
    """Every collective instruction in a compiled program, in program order."""
    text = _text(compiled_or_text)
    per_step = _loop_bodies(text)
    return [Collective(base, comp, comp in per_step, tuple(shapes), nbytes)
            for comp, base, _, shapes, nbytes in iter_collectives(text)]


def count(compiled_or_text, per_step: bool | None = None) -> Counter:
    """``Counter`` of collective kinds; ``per_step`` True/False keeps only loop-body/outside ones."""
    cs = collectives(compiled_or_text)
    return Counter(c.op for c in cs if per_step is None or c.per_step == per_step)


def summary(compiled_or_text) -> str:
    """A printable list of the collectives, one per line."""
    cs = collectives(compiled_or_text)
    if not cs:
        return "no collectives: every device computes alone"
    return "\n".join(str(c) for c in cs)


def constants(compiled_or_text, min_bytes: int = 1024) -> list[tuple[str, int]]:
    """Large ``constant`` instructions: arrays baked into the program itself.

    A closed-over array becomes such a constant, at full size, in every device's
    program, whatever sharding it had before (see chapter 4).
    """
    text = _text(compiled_or_text)
    found = []
    for line in text.splitlines():
        m = _INSTR_RE.match(line)
        if m and m.group(3) == "constant":
            shapes, nbytes = _shape_bytes(m.group(2))
            if nbytes >= min_bytes:
                found.append((f"{shapes[0][0]}[{','.join(map(str, shapes[0][1]))}]", nbytes))
    return found


def constant_bytes(compiled_or_text, min_bytes: int = 1024) -> int:
    """Total bytes of the large constants baked into one device's program."""
    return sum(n for _, n in constants(compiled_or_text, min_bytes))
