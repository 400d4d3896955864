"""Aggregate a BOOK_GAP_LOG (one JSON line per equivalence check run) into the book's
record of tolerance margins: for each check, its tolerance, every configuration it ran
in (device count, XLA:CPU ISA), and the worst ratio of observed difference to tolerance.

  python lab/margins.py LOG [LOG ...] book/data/tolerance_margins.json --command "..."

Rows whose tolerance differs from the verdict the notebook now stores are left out, and
when a check's tolerance changed between logs, only the newest tolerance's rows count.
"""
import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

import provenance  # lab/provenance.py

from shardbook import verify

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ci"))
import notebooks as nbs  # noqa: E402  (ci/notebooks.py)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def stored_tolerances() -> dict:
    """(rtol, atol, exact) of every verdict in the notebooks' stored outputs."""
    sys.path.insert(0, str(nbs.ROOT))

    found: dict = {}
    for path in nbs.notebooks():
        for cell in nbs.code_cells(nbs.load(path)):
            for out in cell.get("outputs", []):
                for m in verify.VERDICT_RE.finditer(nbs.output_text(out)):
                    tol = ((0.0, 0.0, True) if m["rtol"] is None
                           else (float(m["rtol"]), float(m["atol"]), False))
                    found.setdefault(m["check"], set()).add(tol)
    return found


def whole_command(last: str) -> str:
    """The file's command: the checks were measured in parts, each part's own."""
    return ("./lab/margins, in parts: each check's `measured` names its part's command "
            f"and date (the last part: {last})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log", nargs="+", help="gap logs, oldest first")
    ap.add_argument("out")
    ap.add_argument("--command", default="./lab/margins")
    ap.add_argument("--update", action="store_true",
                    help="keep the checks of OUT that these logs did not run (a subset "
                         "of the notebooks was re-measured); drop those no notebook "
                         "prints any more")
    args = ap.parse_args()
    checks: dict = {}
    rows = [json.loads(line) for log in args.log
            for line in Path(log).read_text().splitlines()]
    stored = stored_tolerances()
    for r in rows:
        tol = (r["rtol"], r["atol"], r["exact"])
        if r["check"] in stored and tol not in stored[r["check"]]:
            continue            # an older tolerance than the notebook now prints
        c = checks.get(r["check"])
        if c is None or (c["rtol"], c["atol"], c["exact"]) != tol:
            # a check's first row, or a newer tolerance (logs are read oldest first)
            c = checks[r["check"]] = dict(rtol=r["rtol"], atol=r["atol"],
                                          exact=r["exact"],
                                          notebook=r.get("notebook", ""), runs={})
        key = f"{r['isa']}/{r['devices']}"
        worst = c["runs"].get(key, 0.0)
        ratio = r["ratio"] if r["ratio"] is not None else float("inf")
        c["runs"][key] = max(worst, ratio)
    kept: dict = {}
    if args.update and Path(args.out).exists():
        old = json.loads(Path(args.out).read_text())
        kept = {k: c for k, c in old["checks"].items()
                if k not in checks and k in stored}
        for c in kept.values():  # where each kept check was measured stays its own
            c.setdefault("measured", old["provenance"].get("command", ""))
    today = datetime.date.today().isoformat()
    for c in checks.values():
        c["measured"] = f"{args.command}, {today}"
        c["worst_ratio"] = max(c["runs"].values())
        c["margin"] = None if c["worst_ratio"] == 0 else round(1 / c["worst_ratio"], 1)
        c["runs"] = dict(sorted(c["runs"].items()))
    try:
        sys.path.insert(0, str(nbs.ROOT))

        versions = {p: provenance.version(p)
                    for p in ("jax", "jaxlib", "brainpy", "numpy")}
    except Exception:
        versions = {}
    out = dict(
        provenance=dict(
            what="worst |a - b| / (atol + rtol |b|) of each equivalence check; "
                 "margin = 1 / worst (null: bit-identical everywhere)",
            cpu=cpu_model(), machine=platform.machine(),
            python=platform.python_version(),
            versions=versions, command=whole_command(args.command),
            date=datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds")),
        checks=dict(sorted({**kept, **checks}.items())),
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    low = {k: c["margin"] for k, c in checks.items()
           if c["margin"] is not None and c["margin"] < 10}
    print(f"[margins] {len(checks)} checks written to {args.out}"
          + (f"; margins under 10x: {low}" if low
             else "; every margin is at least 10x"))


if __name__ == "__main__":
    main()
