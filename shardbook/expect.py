"""What each compiler is expected to do with the book's steps: one table, one check.

XLA's CPU and GPU compilers compile the same sharded step to different collectives and
temporaries (chapter 6).  Every such claim of the book is one entry of
``expectations.toml``, keyed by step name, compiler (``cpu`` or ``gpu``) and the JAX
version it was measured with.  A notebook never branches on the platform: :func:`check`
compares with the entry for the program's own compiler (:func:`expected` says it before
compiling)::

    prog = Program(step.lower(xs, ys).compile())   # from shardbook.hlo import Program
    print(expect.check("rnn.hidden", prog, B=8, T=20, H=840, O=8))

An entry lists the collectives, each with its ``op`` and optionally ``phase``
(``once``, ``fwd``, ``bwd``, or ``loop`` for either), ``async``, ``shapes`` (every array
of the result, any order), ``arrays`` (how many), ``bytes`` (result bytes on one
device), ``count`` (default 1) and ``when`` (a condition on the sizes); an ``async``
beside the list applies to all.  ``match = "exact"`` (default): these and no other;
``"includes"``: others allowed.  Strings in braces are filled from the caller's sizes
(``"f32[{B},{H // n}]"``; ``n`` defaults to the program's device count), with
``+ - * / // % **``, comparisons, ``and``/``or``/``not`` and ``x if c else y``.  An
entry may also bound ``memory`` (``{total = {min = "6 * P", below = "7 * P"}}``).  With
one device no step has a collective, unless the entry says
``single_device = "as listed"`` (an explicit ``psum`` stays).  A ``kind = "parameters"``
entry holds a model's numbers (:func:`parameters`).

``$BOOK_EXPECTATIONS`` names another table file (``tests/`` plant changed expectations).
This module imports neither JAX nor BrainPy at import time.
"""
from __future__ import annotations

import ast
import os
import re
import textwrap
import tomllib
from pathlib import Path

__all__ = ["ENV_VAR", "TABLE", "WIDTH", "ExpectationMissing", "check", "entries",
           "entry", "expected", "parameters", "table"]

TABLE = Path(__file__).resolve().parent / "expectations.toml"
ENV_VAR = "BOOK_EXPECTATIONS"
WIDTH = 100   # the widest line a verdict prints (the pages' output width)
_NOT_FIELDS = ("why", "anchor", "jax", "kind")


class ExpectationMissing(KeyError):
    """No entry for this step, compiler and JAX version (or not for these sizes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_CACHE: dict = {}


def _path(path=None) -> Path:
    return Path(path or os.environ.get(ENV_VAR) or TABLE)


def table(path=None) -> dict:
    """The whole table (``$BOOK_EXPECTATIONS`` or the package's own file)."""
    path = _path(path)
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _CACHE:
        with open(path, "rb") as f:
            _CACHE[key] = tomllib.load(f)
    return _CACHE[key]


def _jax_version() -> str:
    from importlib.metadata import version

    return version("jax")


def entries(path=None) -> list[tuple[str, str]]:
    """Every ``(step, compiler)`` pair the table describes."""
    return [(step, compiler) for step, by in table(path).items() if step != "meta"
            for compiler in by]


def entry(step: str, compiler: str, jax_version: str | None = None) -> dict:
    """The entry for ``step`` on ``compiler`` ('cpu' or 'gpu') at this JAX version."""
    t = table()
    jax_version = jax_version or _jax_version()
    name = _path().name
    if step not in t or step == "meta":
        known = ", ".join(k for k in t if k != "meta")
        raise ExpectationMissing(f"no expectation named {step!r} in {name}; "
                                 f"known: {known}")
    if compiler not in t[step]:
        raise ExpectationMissing(f"{step!r} says nothing about the {compiler} compiler "
                                 f"({name})")
    found = t[step][compiler]
    default = str(t.get("meta", {}).get("jax", ""))
    for e in found if isinstance(found, list) else [found]:
        if jax_version.startswith(str(e.get("jax", default))):
            return e
    measured = ", ".join(str(e.get("jax", default))
                         for e in (found if isinstance(found, list) else [found]))
    raise ExpectationMissing(
        f"{step!r} on {compiler} was measured with JAX {measured}; this is JAX "
        f"{jax_version}. Compile the step, compare, and add an entry for it ({name}).")


def parameters(step: str, compiler: str) -> dict:
    """The numbers of a ``kind = "parameters"`` entry (a memory model's constants)."""
    return {k: v for k, v in entry(step, compiler).items() if k not in _NOT_FIELDS}


# ------------------------------------------------------------------ templates
_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp,
            ast.Name, ast.Load, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div,
            ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Not, ast.And,
            ast.Or, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_BRACES = re.compile(r"\{([^{}]+)\}")


def _eval(expr: str, env: dict, where: str):
    tree = ast.parse(expr.strip(), mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise TypeError(f"{where}: {expr!r} uses {type(node).__name__}; an "
                            "expectation may use only arithmetic, comparisons and "
                            "names")
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names = sorted(used - env.keys())
    if names:
        raise TypeError(f"{where} needs the size(s) {', '.join(names)}: pass them to "
                        "expect.check()")
    # only the nodes above: names, numbers and operators, no calls or attributes
    return eval(compile(tree, "<expectation>", "eval"), {"__builtins__": {}}, env)


class _Choose(ast.NodeTransformer):
    """Replace ``x if c else y`` by the branch the sizes choose (for printing)."""

    def __init__(self, env: dict, where: str):
        self.env, self.where = env, where

    def visit_IfExp(self, node):
        test = _eval(ast.unparse(node.test), self.env, self.where)
        return self.visit(node.body if test else node.orelse)


def _shown(expr: str, env: dict, where: str) -> str:
    """``expr`` as printed: ``"(5 if donated else 6) * P"`` -> ``"6 * P"``."""
    tree = _Choose(env, where).visit(ast.parse(expr.strip(), mode="eval"))
    return ast.unparse(tree)


def _fill(value, env: dict, where: str):
    """A template filled from ``env``: ``"{H // n}"`` -> 105, ``"f32[{B}]"`` -> str."""
    if isinstance(value, list):
        return [_fill(v, env, where) for v in value]
    if not isinstance(value, str):
        return value
    whole = _BRACES.fullmatch(value.strip())
    if whole:
        return _eval(whole.group(1), env, where)
    return _BRACES.sub(lambda m: str(_eval(m.group(1), env, where)), value)


# ------------------------------------------------------------------ describing
_PLACE = {"once": "once per call", "fwd": "forward loop", "bwd": "backward loop",
          "loop": "every loop step", None: "anywhere"}


def _items(e: dict, env: dict, where: str) -> list[dict]:
    out = []
    for i, raw in enumerate(e.get("collectives", [])):
        w = f"{where}, collective {i + 1}"
        if "when" in raw and not _eval(raw["when"], env, w):
            continue
        item = {k: _fill(v, env, w) for k, v in raw.items() if k != "when"}
        item.setdefault("count", 1)
        if "async" in e:                 # the entry's default for its collectives
            item.setdefault("async", e["async"])
        if "shapes" in item:
            item["shapes"] = sorted(item["shapes"])
        out.append(item)
    return out


def _describe(item: dict, uniform_mode: bool) -> str:
    text = item["op"]
    if not uniform_mode and "async" in item:
        text += " async" if item["async"] else " sync"
    if "shapes" in item:
        text += " " + "+".join(item["shapes"])
    extra = []
    if "arrays" in item:
        extra.append(f"{item['arrays']} arrays")
    if "bytes" in item:
        extra.append(f"{item['bytes']:,} B")
    if extra:
        text += f" ({', '.join(extra)})"
    return text + f" x{item['count']}"


def _body(items: list[dict]) -> str:
    if not items:
        return "no collective"
    modes = {item.get("async") for item in items}
    uniform = len(modes) == 1 and None not in modes
    groups: dict = {}
    for item in items:
        groups.setdefault(item.get("phase"), []).append(_describe(item, uniform))
    order = ["once", "fwd", "bwd", "loop", None]
    text = "; ".join(f"{_PLACE[p]}: {', '.join(groups[p])}"
                     for p in order if p in groups)
    if uniform:
        text = ("all async: " if modes == {True} else "all sync: ") + text
    return text


def _found(c) -> str:
    mode = "async" if c.async_ else "sync"
    return f"{c.phase} {c.op} {mode} {'+'.join(c.shapes)} ({c.nbytes:,} B)"


def _wrap(text: str) -> str:
    """At most WIDTH columns; "as expected" stays on one line."""
    text = text.replace("as expected", "as\0expected")
    return textwrap.fill(text, width=WIDTH, subsequent_indent="    ",
                         break_on_hyphens=False).replace("\0", " ")


# ------------------------------------------------------------------ matching
def _matches(item: dict, c) -> bool:
    phase = item.get("phase")
    if phase == "loop":
        if c.loop is None:
            return False
    elif phase is not None and c.phase != phase:
        return False
    return (item["op"] == c.op
            and ("async" not in item or bool(item["async"]) == c.async_)
            and ("shapes" not in item or item["shapes"] == sorted(c.shapes))
            and ("arrays" not in item or item["arrays"] == len(c.shapes))
            and ("bytes" not in item or item["bytes"] == c.nbytes))


def _assign(items: list[dict], found, exact: bool) -> bool:
    """Can ``found`` be split so that each item gets exactly its count (and, when
    ``exact``, none is left over)?"""
    want = tuple(item["count"] for item in items)
    fits = [[i for i, item in enumerate(items) if _matches(item, c)] for c in found]
    seen = set()

    def go(j: int, have: tuple) -> bool:
        if (j, have) in seen:
            return False
        seen.add((j, have))
        if j == len(found):
            return have == want
        for i in fits[j]:
            if have[i] < want[i]:
                more = have[:i] + (have[i] + 1,) + have[i + 1:]
                if go(j + 1, more):
                    return True
        return not exact and go(j + 1, have)

    return go(0, (0,) * len(items))


_SIGN = {"min": ">=", "max": "<=", "below": "<"}


def _memory_lines(e: dict, program, env: dict, where: str) -> tuple[list, list]:
    said, bad = [], []
    for key, bounds in e.get("memory", {}).items():
        if program.memory is None:
            bad.append(f"{key}: the program carries no memory analysis")
            continue
        got = program.memory[key]
        for kind, expr in bounds.items():
            limit = _fill("{" + expr + "}", env, f"{where}, memory.{key}.{kind}")
            ok = {"min": got >= limit, "max": got <= limit, "below": got < limit}[kind]
            sign, shown = _SIGN[kind], _shown(expr, env, where)
            said.append(f"{key} {sign} {shown}")
            if not ok:
                bad.append(f"{key} = {got:,} B, expected {sign} {shown} = "
                           f"{limit:,.0f} B")
    return said, bad


def _prepare(step: str, compiler: str, params: dict, devices: int | None):
    e = entry(step, compiler)
    if e.get("kind") == "parameters":
        raise TypeError(f"{step!r} holds a model's parameters; read it with "
                        "expect.parameters()")
    env = dict(table().get("meta", {}).get("constants", {}))
    if devices is not None:
        env["n"] = devices
    env.update(params)
    where = f"xla:{compiler} {step}"
    if "when" in e and not _eval(e["when"], env, where):
        raise ExpectationMissing(f"{where}: the entry holds where {e['when']}; these "
                                 f"sizes are outside it ({_path().name})")
    return e, env, where


def expected(step: str, compiler: str, **params) -> str:
    """What the table expects of ``step`` on ``compiler``, as one line (no compile)."""
    devices = params.pop("devices", None)
    e, env, where = _prepare(step, compiler, params, devices)
    body = ""
    if "collectives" in e:
        one = devices == 1 and e.get("single_device", "none") != "as listed"
        body = "one device, no collective" if one else _body(_items(e, env, where))
    mem = [f"{k} {_SIGN[kind]} {_shown(x, env, where)}"
           for k, b in e.get("memory", {}).items() for kind, x in b.items()]
    parts = [p for p in (body, f"memory: {', '.join(mem)}" if mem else "") if p]
    return _wrap(f"{where}: {'; '.join(parts)}")


def check(step: str, program, **params) -> str:
    """Compare ``program`` (a :class:`shardbook.hlo.Program`) with ``step``'s entry for
    its compiler: one line saying what was checked, or ``AssertionError`` saying what
    differs.  ``ValueError`` if the program does not know its compiler."""
    compiler = program.compiler
    if compiler is None:
        raise ValueError("this Program does not know its compiler: build it from the "
                         "compiled object, or as Program(text, compiler='cpu')")
    e, env, where = _prepare(step, compiler, params, program.devices)
    said, bad = [], []
    if "collectives" in e:
        one = program.devices == 1 and e.get("single_device", "none") != "as listed"
        items = [] if one else _items(e, env, where)
        exact = one or e.get("match", "exact") == "exact"
        said.append("one device, no collective" if one else _body(items))
        if not _assign(items, program.collectives, exact):
            short = [_describe(i, False) for i in items
                     if sum(_matches(i, c) for c in program.collectives) < i["count"]]
            extra = [_found(c) for c in program.collectives
                     if not any(_matches(i, c) for i in items)]
            lines = [f"expected ({'exact' if exact else 'includes'}): {_body(items)}",
                     "found: " + ("; ".join(_found(c) for c in program.collectives)
                                  or "no collective")]
            if short:
                lines.append("missing: " + "; ".join(short))
            if extra and exact:
                lines.append("not expected: " + "; ".join(extra))
            if not short and not (extra and exact):
                lines.append("the collectives do not split into the expected counts")
            bad.extend(lines)
    mem_said, mem_bad = _memory_lines(e, program, env, where)
    if mem_said:
        said.append("memory: " + ", ".join(mem_said))
    bad.extend(mem_bad)
    if bad:
        jax = e.get("jax", table().get("meta", {}).get("jax", "?"))
        head = (f"{where} ({_path().name}, measured with JAX {jax}): the compiled "
                "program is not what the table says")
        why = f"why: {' '.join(str(e.get('why', '')).split())}"
        raise AssertionError("\n".join([_wrap(head)] + [_wrap("  " + b) for b in bad]
                                       + [_wrap("  " + why)]))
    return _wrap(f"{where}: {'; '.join(said)}: as expected")
