"""Compile the book's GPU-target programs and store them in book/data/gpu_programs/.

The pages (2c, 3c, 4b, 5c, 6, 7) and the tests read these programs with
``shardbook.gputarget.programs``; they compile nothing when the store is fresh.  A
stored program is stale when the code its builder runs, the installed JAX and
BrainPy family, the pinned wheels, the target's spec or the flags changed
(``shardbook.gputarget.made_from``);
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
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shardbook import gputarget as gt  # noqa: E402


def stored_jobs(folder: Path) -> list[dict]:
    """Every job the store holds, as its files name it."""
    return [json.loads(gzip.decompress(f.read_bytes()))["job"]
            for f in sorted(folder.glob("*.json.gz"))]


def stale(jobs: list[dict], folder: Path) -> list[dict]:
    out = []
    for job in jobs:
        record = gt.stored(job, folder)
        if record is None or "stale" in record["meta"]:
            out.append(job)
    return out


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "shardbook"],
                           cwd=ROOT, capture_output=True, text=True, check=False)
    edited = " (shardbook/ edited)" if dirty.stdout.strip() else ""
    return done.stdout.strip() + edited


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
    made = commit()
    inputs = [gt.made_from(job) for job in todo]   # before the compile, not after
    answers = gt.start_jobs(todo, timeout=args.timeout).result()
    for job, answer, made_from in zip(todo, answers, inputs):
        f = gt.store(job, answer, args.folder, commit=made, made=made_from)
        print(f"stored {f.name}: {job['builder'].split(':')[-1]} {job['kwargs']} "
              f"{job['target']} x {job['devices'] * job['hosts']}")
    print(f"compiled {len(todo)} program(s) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
