"""Compile the book's GPU-target programs and store them in book/data/gpu_programs/.

The pages (2c, 3c, 4b, 5c, 6, 7) and the tests read these programs with
``shardbook.gputarget.programs``, which compiles only a job the store lacks.  A stored
program is stale when the code its builder runs, the installed JAX and
BrainPy family, the pinned wheels, the target's spec or the flags changed
(:func:`made_from`);
``tests/test_gputarget.py`` then fails and names this command.

    python lab/gpu_programs.py                 recompile the stale programs
    python lab/gpu_programs.py --all           recompile every stored program
    python lab/gpu_programs.py --add JOB.json  store new jobs (a JSON list of jobs)
    python lab/gpu_programs.py --check         list the stale ones; exit 1 if any

Needs the GPU-target wheels (``ci/install_gpu_target``); about 4 minutes for all on
a 2-core machine.
"""
from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import os
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import provenance  # noqa: E402  (lab/provenance.py)

from shardbook import gputarget as gt  # noqa: E402

# ----------------------------------------------------- what a program is made from
# Each stored program records what it was made from: the digest of the *code* its
# builder runs (:func:`code_digest`: the builder function, what it uses of its module,
# and the package modules those import; docstrings and comments left out), the
# installed JAX and BrainPy family (:data:`TRACED_BY`), the pinned wheels, the
# target's spec and the flags.  A stored program whose inputs changed is stale:
# ``tests/test_gputarget.py`` fails and names this script.  Editing a docstring
# changes nothing; editing one builder leaves the others fresh.
PACKAGE = ROOT / "shardbook"
_DIGESTS: dict[str, str] = {}


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != PACKAGE.name:
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def package_imports(name: str, tree) -> set[str]:
    """The package modules that module ``name`` imports, anywhere in its body."""

    package = name if _module_file(name).name == "__init__.py" else \
        name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if _module_file(m) is not None}


def code_text(tree) -> str:
    """The module's code as a dump of its syntax tree: no docstrings, comments, line
    numbers or ``__version__`` (a release names itself; no program reads it).  The dump
    names each node and its non-empty fields (``ast.iter_fields``), so that it reads
    the same on Python 3.11 to 3.13, whose ``ast.dump`` differ
    (``tests/test_gputarget.py`` compares every Python it finds)."""

    tree.body = [n for n in tree.body if not (isinstance(n, ast.Assign) and [
        ast.unparse(t) for t in n.targets] == ["__version__"])]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]

    def dump(x) -> str:
        if isinstance(x, ast.JoinedStr):   # 3.12 adds empty strings to format specs
            x = ast.JoinedStr(values=[v for v in x.values if not (
                isinstance(v, ast.Constant) and v.value == "")])
        if isinstance(x, ast.AST):
            fields = [f"{k}={dump(v)}" for k, v in ast.iter_fields(x)
                      if v is not None and v != [] and k not in _NEWER_FIELDS]
            return f"{type(x).__name__}({', '.join(fields)})"
        if isinstance(x, list):
            return "[" + ", ".join(dump(v) for v in x) + "]"
        return repr(x)

    return dump(tree)


# fields that newer Pythons add to old nodes (3.12: type parameters of a def or class)
_NEWER_FIELDS = ("type_params", "type_comment")


def source_of(module: str) -> str:
    """The source text of a package module (``shardbook.rnn`` is its ``__init__``)."""
    return _module_file(module).read_text()


def builder_tree(module: str, function: str, read=None) -> ast.Module:
    """The part of ``module`` that its builder ``function`` runs: the module's top
    level without its functions and classes (imports, constants; not ``__all__``),
    ``function``, and the top-level functions, classes and names it uses, transitively.
    Another builder of the same module is not in it, nor are the imports only that
    builder makes."""
    tree = ast.parse((read or source_of)(module))
    named = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            named[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Name):
                    named[t.id] = node
    if function not in named:
        raise KeyError(f"{module} has no builder {function!r}")
    keep, todo = [], [function]
    while todo:
        node = named[todo.pop()]
        if any(node is k for k in keep):
            continue
        keep.append(node)
        todo.extend(n.id for n in ast.walk(node)
                    if isinstance(n, ast.Name) and n.id in named)
    top = [n for n in tree.body if not isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
            ast.AnnAssign))]
    kept = [n for n in tree.body if any(n is k for k in keep)]   # in source order
    return ast.Module(body=top + kept, type_ignores=[])


def code_digest(builder: str, read=None) -> str:
    """The digest of the code that ``builder`` runs (``"module:function"``, or a whole
    module): for a function, the part of its module it uses (:func:`builder_tree`),
    then every package module that part imports, transitively (functions' own imports
    included), with the ``__init__`` of every package on the way, as
    :func:`code_text` reads them.  A docstring or a comment does not change it; a
    changed line of code does, and an edit of one builder leaves the others' digests.
    ``read``: a function of a module's name that gives its source (default
    :func:`source_of`)."""

    if read is None and builder in _DIGESTS:
        return _DIGESTS[builder]
    read_source = read or source_of
    module, _, function = builder.partition(":")
    if function:
        first = builder_tree(module, function, read)
        imports, code = package_imports(module, first), code_text(first)
    else:
        imports, code = _module_code(module, read_source(module))
    codes = {builder: code}
    seen, todo = {module}, [*imports, gt.__name__]   # gt compiles every job
    parts = module.split(".")
    todo.extend(".".join(parts[:k]) for k in range(1, len(parts)))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        imports, codes[name] = _module_code(name, read_source(name))
        todo.extend(imports)
        # importing a.b.c runs the __init__ of a and of a.b first
        parts = name.split(".")
        todo.extend(".".join(parts[:k]) for k in range(1, len(parts)))
    h = hashlib.sha256()
    for name in sorted(codes):
        h.update(name.encode() + b"\0" + codes[name].encode() + b"\0")
    digest = h.hexdigest()[:16]
    if read is None:
        _DIGESTS[builder] = digest
    return digest


_CODES: dict[tuple[str, str], tuple[set, str]] = {}


def _module_code(name: str, source: str) -> tuple[set, str]:
    """(the package modules it imports, :func:`code_text`) of module ``name`` with
    this ``source``, parsed once per source text."""
    if (name, source) not in _CODES:
        tree = ast.parse(source)
        _CODES[name, source] = (package_imports(name, tree), code_text(tree))
    return _CODES[name, source]


def _flags(target: str) -> list[str]:
    """XLA_FLAGS that can change ``target``'s program.  The simulated device count
    never does, nor the vector ISA (the portability gate's); XLA:CPU's other flags
    change only an XLA:CPU program."""
    skip = ("--xla_force_host_platform", "--xla_cpu_max_isa")
    if target != "cpu":
        skip += ("--xla_cpu_",)
    flags = os.environ.get("XLA_FLAGS", "").split()
    return [f for f in flags if not f.startswith(skip)]


# The installed packages a builder's program depends on besides the book's own code:
# JAX, BrainPy and what BrainPy requires
TRACED_BY = ("jax", "jaxlib", "brainpy", "brainstate", "brainevent", "brainunit",
             "braintools", "brainpy_state", "numpy", "ml_dtypes", "opt_einsum")


def _versions() -> str:

    def version(p):
        try:
            return metadata.version(p)
        except metadata.PackageNotFoundError:
            return "absent"

    return " ".join(f"{p}=={version(p)}" for p in TRACED_BY)


def made_from(job: dict) -> dict:
    """What a compile of ``job`` depends on, as a stored program records it: the code
    its builder runs, the installed JAX and BrainPy family (:data:`TRACED_BY`), the
    pinned wheels, the GPU flags and the target's spec."""
    job = gt.normal_job(job)
    target = job["target"]
    return {"code": code_digest(job["builder"]),
            "versions": _versions(), "wheels": gt.wheels_stamp(),
            "flags": " ".join(_flags(target)),
            "spec": "" if target == "cpu" else
            hashlib.sha256(gt.spec_text(target).encode()).hexdigest()[:16]}


def stored(job: dict, folder=None) -> dict | None:
    """The stored answer of ``job`` (``gt.stored``), or None; ``"stale"`` in its meta
    when the code, versions, wheels, spec or flags it was made from are not those of
    this tree."""
    record = gt.stored(job, folder)
    if record is None:
        return None
    now, then = made_from(job), record.get("made_from", {})
    differ = sorted(k for k in now if now[k] != then.get(k))
    if differ:
        record["meta"]["stale"] = differ
    return record


def store(job: dict, answer: dict, folder=None, commit: str = "",
          made: dict | None = None) -> Path:
    """Write ``answer`` (a child's Program JSON) as ``job``'s stored program; ``made``:
    its :func:`made_from`, taken before the compile started (default: now)."""
    folder = Path(folder or gt.STORE_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    made = made if made is not None else made_from(job)
    record = {**answer, "job": gt.normal_job(job), "made_from": made,
              "made_by": {"command": gt.REFRESH, "commit": commit}}
    record.pop("child_s", None)
    f = folder / f"{gt.job_key(job)}.json.gz"
    f.write_bytes(gzip.compress(json.dumps(record, sort_keys=True, indent=0).encode(),
                                mtime=0))
    return f


def stored_jobs(folder: Path) -> list[dict]:
    """Every job the store holds, as its files name it."""
    return [json.loads(gzip.decompress(f.read_bytes()))["job"]
            for f in sorted(folder.glob("*.json.gz"))]


def stale(jobs: list[dict], folder: Path) -> list[dict]:
    out = []
    for job in jobs:
        record = stored(job, folder)
        if record is None or "stale" in record["meta"]:
            out.append(job)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="recompile every stored job")
    ap.add_argument("--add", type=Path, help="a JSON file with a list of new jobs")
    ap.add_argument("--check", action="store_true", help="list stale jobs, exit 1")
    ap.add_argument("--folder", type=Path, default=gt.STORE_DIR)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    jobs = stored_jobs(args.folder)
    if args.add:
        jobs += [gt.normal_job(j) for j in json.loads(args.add.read_text())]
    todo = jobs if args.all else stale(jobs, args.folder)
    if args.check:
        for job in todo:
            print(f"stale: {json.dumps(job, sort_keys=True)}")
        print(f"{len(todo)} of {len(jobs)} stored program(s) stale")
        return 1 if todo else 0
    if not todo:
        print(f"all {len(jobs)} stored programs are fresh")
        return 0
    gt.install(verbose=True)
    t0 = time.perf_counter()
    by = provenance.commit()
    inputs = [made_from(job) for job in todo]   # before the compile, not after
    answers = gt.start_jobs(todo, timeout=args.timeout).result()
    for job, answer, made in zip(todo, answers, inputs):
        f = store(job, answer, args.folder, commit=by, made=made)
        print(f"stored {f.name}: {job['builder'].split(':')[-1]} {job['kwargs']} "
              f"{job['target']} x {job['devices'] * job['hosts']}")
    print(f"compiled {len(todo)} program(s) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
