"""The one reader of compiled XLA programs: :class:`Program`.

``compiled.as_text()`` is the optimized, partitioned HLO every device runs; each
collective is one instruction (:data:`EXAMPLE_LINE`).  A loop (``jax.lax.scan``,
``bm.for_loop``) becomes a ``while`` whose body runs once per time step, so collectives
in a loop body are *per step*, others *per call*::

    prog = Program(step.lower(xs, ys).compile())   # compiler inferred: "cpu" or "gpu"
    prog.collectives       # (Collective(op="all-reduce", phase="bwd", ...), ...)
    prog.whiles            # (While(phase="fwd", known_trip_count=50, ...), ...)
    print(prog.table())    # the collectives per place, at most 100 columns
    prog.traffic()         # (launches, result bytes) per call, at the trip counts

A ``Program`` travels as JSON (:meth:`Program.to_json`, :meth:`Program.from_json`).
This module imports neither JAX nor BrainPy at import time.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass

__all__ = ["COLLECTIVES", "EXAMPLE_LINE", "Collective", "Program", "While",
           "shape_bytes"]

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute",
               "all-to-all", "collective-broadcast", "ragged-all-to-all")

# region: hlo.collective-line
# One collective of chapter 2's training step, as XLA:CPU prints it (4 devices):
# the gradients of W_in, W_rec and W_out, summed over the devices in ONE instruction.
EXAMPLE_LINE = (
    "%all-reduce.16 = (f32[32,4]{1,0}, f32[32,32]{1,0}, f32[2,32]{1,0}) "
    "all-reduce(%dot.24, %dot.25, %dot.26), channel_id=1, "
    "replica_groups=mesh['axis_0'=4,'axis_1'=1] {'axis_0'}, "
    "use_global_device_ids=true, to_apply=%add.clone")
#  name             = result type (per device)                        opcode(operands)
# XLA:GPU writes the same sum as a pair that runs beside other work (asynchronous):
#   %all-reduce-start = f32[1217]{0} all-reduce-start(%wrapped_concatenate), ...
#   %all-reduce-done = f32[1217]{0} all-reduce-done(%all-reduce-start)
# endregion

_BITS = {"pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
         "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64,
         "f64": 64, "c64": 64, "c128": 128}
_COMP_RE = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s+->\s+.*\{\s*$")
_INSTR_RE = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s+=\s+(.+?)\s+([a-z][\w\-]*)\((.*)$")
_GROUPS_RE = re.compile(
    r"replica_groups=(\{[\d,{}\s]*\}|\[[\d,]+\]<=|mesh\[([^\]]*)\]\s*\{([^}]*)\})")
_SHAPE_RE = re.compile(r"\b(pred|[a-z]+\d+[a-z0-9]*)\[([\d,]*)\]")
_CALL_RE = re.compile(
    r"\b(?:calls|to_apply|body|condition|true_computation|false_computation)"
    r"=%?([\w.\-]+)")
_CALL_SET_RE = re.compile(
    r"\b(?:calls|branch_computations|called_computations)=\{([^}]*)\}")
_TRIPS_RE = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')
_OP_NAME_RE = re.compile(r'op_name="([^"]*)"')
_CUSTOM_TARGET_RE = re.compile(r'custom_call_target="([^"]+)"')


def _bits(dtype: str) -> int:
    if dtype.startswith(("f8", "s8", "u8")):
        return 8
    if dtype.startswith(("f4", "s2", "u2")):
        return int(dtype[1])
    return _BITS.get(dtype, 32)


def _shapes(type_str: str) -> tuple[str, ...]:
    """``"f32[8,840]"`` for every array in an HLO type (layouts dropped)."""
    return tuple(f"{d}[{dims}]" for d, dims in _SHAPE_RE.findall(type_str)
                 if d != "token")


def shape_bytes(shape: str) -> int:
    """Bytes of one array written ``"f32[8,840]"``."""
    dtype, dims = shape[:-1].split("[")
    n = math.prod(int(d) for d in dims.split(",") if d)
    return (n * _bits(dtype) + 7) // 8


def _group_size(line: str, devices: int) -> int | None:
    """Devices in one replica group of a collective instruction.

    Reads a mesh form (``mesh['axis_0'=2,'axis_1'=4] {'axis_1'}``: 4), the iota form
    (``[2,4]<=[8]``: [groups, size]) and a list (``{{0,1},{2,3}}``; ``{}`` and no
    ``replica_groups`` mean every device).  None for an unknown form (a sub-axis such as
    ``{'axis_1':(1)2}``)."""
    if "replica_groups=" not in line:
        return devices
    m = _GROUPS_RE.search(line)
    if not m:
        return None
    g = m.group(1)
    if g.startswith("mesh"):
        sizes = dict(re.findall(r"'([\w]+)'=(\d+)", m.group(2)))
        axes = re.findall(r"'([\w]+)'", m.group(3))
        if not axes or any(a not in sizes for a in axes) or ":" in m.group(3):
            return None
        n = 1
        for a in axes:
            n *= int(sizes[a])
        return n
    if g.startswith("["):
        return int(g[1:g.index("]")].split(",")[-1])
    first = re.search(r"\{([\d,\s]*)\}", g).group(1)
    ids = [x for x in first.split(",") if x.strip()]
    return len(ids) if ids else devices


def _split_top(s: str) -> list[str]:
    """Split ``s`` at commas that are not inside (), [] or {}."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + ([cur.strip()] if cur.strip() else [])


def _result_type(op: str, type_str: str) -> str:
    """The part of an instruction's type that is the collective's *result*.

    A ``-start`` op other than ``all-reduce-start`` returns ``(operands, results[,
    context])`` (``xla/service/hlo_verifier.cc``).  A combined collective has several
    results; all count."""
    if op.endswith("-start") and op != "all-reduce-start":
        t = type_str.strip()
        parts = _split_top(t[1:-1]) if t.startswith("(") and t.endswith(")") else [t]
        return parts[1] if len(parts) >= 2 else parts[0]
    return type_str


@dataclass(frozen=True)
class Collective:
    """One collective instruction of a compiled program, as one device runs it."""

    op: str                 # "all-reduce", "all-gather", ...: "-start" folded in
    async_: bool            # a -start/-done pair, or wrapped in async-start (XLA:GPU)
    computation: str        # the HLO computation it sits in
    loop: int | None        # index in Program.whiles of the outermost loop running it
    phase: str              # "once", or the phase of that loop: "fwd" or "bwd"
    per_step: bool          # runs once per iteration of some loop
    shapes: tuple           # ("f32[8,840]", ...): every array of its RESULT
    nbytes: int             # bytes of its result on one device
    group: int | None = None  # devices in its replica group; None: not read

    @property
    def shown_shapes(self) -> str:
        """The shapes, or ``"3 arrays"`` where they would not fit a table column."""
        text = " ".join(self.shapes)
        return text if len(self.shapes) <= 2 and len(text) <= 29 \
            else f"{len(self.shapes)} arrays"

    def where(self) -> str:
        if self.loop is None:
            return "once per call"
        return f"per step of loop {self.loop} ({self.phase})"

    def __str__(self) -> str:
        mode = "async" if self.async_ else "sync"
        return (f"{self.op:<18} {mode:<5} {self.shown_shapes:<28} {self.nbytes:>11,} B"
                f"  {self.where()}")


@dataclass(frozen=True)
class While:
    """One ``while`` loop of a compiled program."""

    index: int                      # its place in Program.whiles (outermost first)
    name: str                       # the while instruction
    computation: str                # where the while instruction sits
    body: str
    condition: str
    phase: str                      # "bwd": its op_name has "transpose(", else "fwd"
    known_trip_count: int | None    # what XLA proved, from its backend_config
    outer: int | None               # index of the loop whose body runs this one
    op_name: str = ""


# region: hlo.loop-phase
def _phase(op_name: str) -> str:
    # jax.grad transposes the forward loop into the backward loop: JAX names that
    # while "transpose(jvp(...))/while" in the op_name it leaves in the metadata.
    return "bwd" if "transpose(" in op_name else "fwd"
# endregion


def _compiler_of(compiled) -> str | None:
    """'cpu' or 'gpu', from the devices of a compiled program's input shardings."""
    import jax

    trees = [getattr(compiled, "input_shardings", None),
             getattr(compiled, "output_shardings", None)]
    for sharding in jax.tree_util.tree_leaves(trees):
        for device in getattr(sharding, "device_set", ()):
            platform = device.platform.lower()
            return "gpu" if platform in ("gpu", "cuda", "rocm") else platform
    return None


class Program:
    """A compiled program, read once: collectives, loops, memory and constants.

    ``Program(compiled)`` takes a ``jax.stages.Compiled`` (compiler read from its
    devices' platform, ``"gpu"`` also for ``jax.experimental.topologies`` devices) or
    the ``as_text()`` text with the compiler named (``Program(text, "gpu")``).

    Attributes: ``compiler`` (``None``: unknown), ``devices`` (partitions x replicas),
    ``collectives``, ``whiles``, ``custom_calls`` (targets of its ``custom-call``
    instructions; ``None`` from an older text-less file), ``memory``
    (:func:`shardbook.memory.compiled_memory`, when built from a compiled program),
    ``text`` and ``meta`` (where it was compiled; filled by ``shardbook.gputarget``)."""

    def __init__(self, compiled_or_text, compiler: str | None = None, *,
                 memory: dict | None = None, meta: dict | None = None):
        if isinstance(compiled_or_text, str):
            text = compiled_or_text
        else:
            from .memory import compiled_memory

            text = compiled_or_text.as_text()
            compiler = compiler or _compiler_of(compiled_or_text)
            memory = memory if memory is not None else compiled_memory(compiled_or_text)
        self.text, self.compiler, self.memory = text, compiler, memory
        self.meta = dict(meta or {})
        self._constants: list | None = None
        self._parse(text)

    # ------------------------------------------------------------------ reading
    def _parse(self, text: str) -> None:
        """Read ``text`` once: collectives, loops, custom calls, constants, calls.

        Long because: one pass over the text reads every kind of instruction the book
        counts; split, the text would be read once per kind."""
        calls: dict[str, set[str]] = {}
        ops_of: dict[str, list[str]] = {}  # each computation's opcodes, in order
        custom_calls: set[str] = set()
        found, raw_whiles, async_calls, constants = [], [], set(), []
        current = None
        head = text.split("\n", 1)[0]
        parts = re.search(r"num_partitions=(\d+)", head)
        replicas = re.search(r"replica_count=(\d+)", head)
        self.devices = (int(parts.group(1)) if parts else 1) * \
            (int(replicas.group(1)) if replicas else 1)
        for line in text.splitlines():
            m = _COMP_RE.match(line)
            if m:
                current = m.group(1)
                calls[current] = set()
                ops_of[current] = []
                continue
            if current is None:
                continue
            edges = calls[current]
            edges.update(_CALL_RE.findall(line))
            for group in _CALL_SET_RE.findall(line):
                edges.update(x.strip().lstrip("%") for x in group.split(",")
                             if x.strip())
            m = _INSTR_RE.match(line)
            if not m:
                continue
            name, type_str, op = m.group(1), m.group(2), m.group(3)
            ops_of[current].append(op)
            if op == "custom-call":
                target = _CUSTOM_TARGET_RE.search(line)
                custom_calls.add(target.group(1) if target else "?")
            if op == "while":
                body = re.search(r"\bbody=%?([\w.\-]+)", line).group(1)
                cond = re.search(r"\bcondition=%?([\w.\-]+)", line)
                op_name = _OP_NAME_RE.search(line)
                trips = _TRIPS_RE.search(line)
                raw_whiles.append({
                    "name": name, "computation": current, "body": body,
                    "condition": cond.group(1) if cond else "",
                    "op_name": op_name.group(1) if op_name else "",
                    "known_trip_count": int(trips.group(1)) if trips else None})
            elif op == "async-start":
                async_calls.update(_CALL_RE.findall(line))
            elif op == "constant":
                shapes = _shapes(type_str)
                if shapes:
                    constants.append((shapes[0], shape_bytes(shapes[0])))
            base = op.removesuffix("-start")
            if base in COLLECTIVES:
                shapes = _shapes(_result_type(op, type_str))
                group = (None if base == "collective-permute"  # source-target pairs
                         else _group_size(line, self.devices))
                found.append((current, base, op.endswith("-start"), shapes, group))
        self._constants = constants
        self._ops_of = {k: tuple(v) for k, v in ops_of.items()}
        self.custom_calls = tuple(sorted(custom_calls))

        def reach(start: str) -> set[str]:
            seen, stack = {start}, [start]
            while stack:
                for callee in calls.get(stack.pop(), ()):
                    if callee not in seen:
                        seen.add(callee)
                        stack.append(callee)
            return seen

        runs = [reach(w["body"]) | reach(w["condition"]) if w["condition"]
                else reach(w["body"]) for w in raw_whiles]
        # the loop whose body runs each while: the innermost of those that reach it
        parent = []
        for i, w in enumerate(raw_whiles):
            holders = [j for j in range(len(raw_whiles))
                       if j != i and w["computation"] in runs[j]]
            parent.append(min(holders, key=lambda j: len(runs[j])) if holders else None)
        # number the loops: outermost first (in program order), then the nested ones
        order = sorted(range(len(raw_whiles)), key=lambda i: (parent[i] is not None, i))
        new = {old: k for k, old in enumerate(order)}
        self.whiles = tuple(
            While(index=new[i], name=w["name"], computation=w["computation"],
                  body=w["body"], condition=w["condition"], phase=_phase(w["op_name"]),
                  known_trip_count=w["known_trip_count"],
                  outer=None if parent[i] is None else new[parent[i]],
                  op_name=w["op_name"])
            for i, w in sorted(enumerate(raw_whiles), key=lambda iw: new[iw[0]]))
        self._enclosing: dict[str, tuple[int, ...]] = {}
        for i, w in enumerate(raw_whiles):
            for comp in runs[i]:
                self._enclosing[comp] = self._enclosing.get(comp, ()) + (new[i],)
        async_comps = set().union(set(), *[reach(c) for c in async_calls])
        out = []
        for comp, base, started, shapes, group in found:
            loops = self._enclosing.get(comp, ())
            outer = [k for k in loops if self.whiles[k].outer is None]
            loop = min(outer) if outer else (min(loops) if loops else None)
            out.append(Collective(
                op=base, async_=started or comp in async_comps, computation=comp,
                loop=loop, phase="once" if loop is None else self.whiles[loop].phase,
                per_step=bool(loops), shapes=shapes,
                nbytes=sum(shape_bytes(s) for s in shapes), group=group))
        self.collectives = tuple(out)

    # ------------------------------------------------------------------ views
    def __repr__(self) -> str:
        return (f"Program(xla:{self.compiler or '?'}, {self.devices} device(s), "
                f"{len(self.collectives)} collective(s), {len(self.whiles)} loop(s))")

    def counts(self, by="op", **where) -> Counter:
        """``Counter`` of the collectives by a field (or a tuple of fields).

        ``where`` keeps those whose fields equal the values given:
        ``prog.counts(per_step=True)["all-gather"]``,
        ``prog.counts(("phase", "op"))[("bwd", "reduce-scatter")]``."""
        keys = (by,) if isinstance(by, str) else tuple(by)
        kept = [c for c in self.collectives
                if all(getattr(c, k) == v for k, v in where.items())]
        return Counter(getattr(c, keys[0]) if len(keys) == 1
                       else tuple(getattr(c, k) for k in keys) for c in kept)

    def rows(self) -> list[dict]:
        """One dict per group of collectives alike in place, op, mode and shapes:
        ``where``, ``op``, ``async_``, ``shapes``, ``count``, ``bytes`` (result bytes on
        one device, summed) and ``shown``."""
        groups: dict[tuple, list[Collective]] = {}
        for c in self.collectives:
            where = "once" if c.loop is None else \
                f"loop {c.loop}" + (" (backward)" if c.phase == "bwd" else "")
            groups.setdefault((where, c.op, c.async_, " ".join(c.shapes)), []).append(c)
        return [{"where": w, "op": op, "async_": a, "shapes": s, "count": len(cs),
                 "bytes": sum(c.nbytes for c in cs), "shown": cs[0].shown_shapes}
                for (w, op, a, s), cs in sorted(groups.items())]

    def table(self, title: str = "") -> str:
        """The collectives, one row per place and kind (at most 100 columns)."""
        lines = [title] if title else []
        rows = self.rows()
        if not rows:
            return "\n".join(lines + ["  (no collectives)"])
        lines.append(f"  {'where':<14}{'collective':<20}{'mode':<7}"
                     f"{'result per device':<30}{'n':>3}{'bytes':>13}")
        for r in rows:
            mode = "async" if r["async_"] else "sync"
            lines.append(f"  {r['where'].replace('(backward)', 'bwd'):<14}{r['op']:<20}"
                         f"{mode:<7}{r['shown']:<30}{r['count']:>3}{r['bytes']:>13,}")
        return "\n".join(lines)

    def summary(self) -> str:
        """A printable list of the collectives, one per line, in program order."""
        if not self.collectives:
            return "no collectives: every device computes alone"
        return "\n".join(str(c) for c in self.collectives)

    def body_ops(self, loop: While) -> tuple[str, ...]:
        """The opcodes of ``loop``'s body, in program order (``"fusion"``, ``"while"``,
        ...).  ``ValueError`` for a Program from an older text-less file."""
        if self._ops_of is None:
            raise ValueError("this Program was saved without its instructions (an "
                             "older text-less file): compile it again to read them")
        return self._ops_of.get(loop.body, ())

    def time_loop(self) -> While:
        """The last outermost ``while`` loop: the loop over time.  ``ValueError`` if
        there is none."""
        outer = [w for w in self.whiles if w.outer is None]
        if not outer:
            raise ValueError("no time loop (while) in this program")
        return outer[-1]

    def constants(self, min_bytes: int = 1024) -> list[tuple[str, int]]:
        """Large ``constant`` instructions ``(shape, bytes)``: arrays baked into the
        program.  A closed-over array becomes one, at full size, on every device
        whatever its sharding (chapter 4)."""
        return [(s, b) for s, b in self._constants or () if b >= min_bytes]

    def constant_bytes(self, min_bytes: int = 1024) -> int:
        """Total bytes of the large constants baked into one device's program."""
        return sum(b for _, b in self.constants(min_bytes))

    def trips_of(self, collective: Collective, trips: int | None = None) -> int:
        """How often ``collective`` runs per call: the product of its loops' trip
        counts (``trips`` for each, else the known ones; ``ValueError`` if unknown)."""
        n = 1
        for k in self._enclosing.get(collective.computation, ()):
            t = trips if trips is not None else self.whiles[k].known_trip_count
            if t is None:
                raise ValueError(f"loop {k} ({self.whiles[k].name}) has no known trip "
                                 "count; pass trips=")
            n *= t
        return n

    def traffic(self, trips: int | None = None) -> tuple[int, int]:
        """(collectives launched, result bytes) per call, on one device, when every loop
        runs ``trips`` iterations (default: each loop's known trip count)."""
        reps = [self.trips_of(c, trips) for c in self.collectives]
        return sum(reps), sum(r * c.nbytes for r, c in zip(reps, self.collectives))

    # ------------------------------------------------------------------ JSON
    def to_json(self, text: bool = True) -> dict:
        """A JSON-ready dict; :meth:`from_json` rebuilds the same Program.

        ``text=False`` stores the parsed fields instead of the HLO text (smaller)."""
        out = {"schema": "shardbook.hlo.Program/1", "compiler": self.compiler,
               "devices": self.devices, "memory": self.memory, "meta": self.meta}
        if text and self.text is not None:
            out["text"] = self.text
        else:
            out.update(collectives=[asdict(c) for c in self.collectives],
                       whiles=[asdict(w) for w in self.whiles],
                       constants=self._constants or [],
                       enclosing={k: list(v) for k, v in self._enclosing.items()},
                       ops={k: list(v) for k, v in (self._ops_of or {}).items()},
                       custom_calls=list(self.custom_calls or ()))
        return out

    @classmethod
    def from_json(cls, data: dict | str) -> Program:
        """The Program that :meth:`to_json` described."""
        data = json.loads(data) if isinstance(data, str) else data
        if data.get("text") is not None:
            return cls(data["text"], data.get("compiler"), memory=data.get("memory"),
                       meta=data.get("meta"))
        prog = cls("", data.get("compiler"), memory=data.get("memory"),
                   meta=data.get("meta"))
        prog.text = None
        prog.devices = data.get("devices", 1)
        prog.collectives = tuple(Collective(**{**c, "shapes": tuple(c["shapes"])})
                                 for c in data["collectives"])
        prog.whiles = tuple(While(**w) for w in data["whiles"])
        prog._constants = [tuple(c) for c in data.get("constants", [])]
        prog._enclosing = {k: tuple(v) for k, v in data.get("enclosing", {}).items()}
        prog._ops_of = ({k: tuple(v) for k, v in data["ops"].items()}
                        if "ops" in data else None)  # older files: not saved
        prog.custom_calls = (tuple(data["custom_calls"]) if "custom_calls" in data
                             else None)  # older files: not saved, so not known
        return prog
