"""Run the book's test jobs as a small pool: a few at a time, longest first.

  python ci/pool.py --mode strict --tests NOTEBOOK ...     (./ci/test calls this)

Every notebook is one job: ``pytest --nbval`` on that notebook alone, so it runs in a
fresh kernel, with the flags of its mode (strict nbval with ``ci/sanitize.cfg``, or
lax).  With ``--tests`` the helper tests (``tests/``) are a few more jobs, the test
files packed into groups of about equal time.  ``--workers`` jobs run at once (default
2: CI's machine has 2 cores), the longest first (the LPT rule: on two workers the
makespan is at most 7/6 of the best possible).  A job's time comes from the JUnit XML
of the last run (``--junit-dir``, written by every job with ``--junitxml``), else from
the committed estimate ``ci/estimates.json``, else 60 s.

Each job's output goes to ``_build/logs/<job>.log``; the log of a failed job, and the
helper tests' summary, are printed at the end.  A job that runs longer than
``--job-timeout`` seconds (``BOOK_JOB_TIMEOUT_S``, default 900: about twice the
longest job on CI's slowest machine yet, 466 s) is killed, with every process it
started, and fails, so that a hang names the job that hung.  Either gate then ends
within the 40 minutes that .github/workflows/book.yml gives ``.ci/run``.  Exit status
1 if any job failed.
``python ci/pool.py --update-estimates`` rewrites ``ci/estimates.json`` from the
JUnit XML of the last strict run.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ESTIMATES = ROOT / "ci" / "estimates.json"
DEFAULT_S = 60.0
JOB_TIMEOUT_S = 900.0
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
FLAGS = {
    "strict": ["--nbval", "--nbval-sanitize-with", "ci/sanitize.cfg"],
    "portable": ["--nbval", "--nbval-sanitize-with", "ci/sanitize.cfg"],
    "lax": ["--nbval-lax"],
    "gpu": ["--nbval-lax"],
}


# ---------------------------------------------------------------- JUnit XML


@dataclass
class Suite:
    """What one pytest run's JUnit XML says."""

    seconds: float
    tests: int
    failures: int
    skipped: int
    by_file: dict = field(default_factory=dict)   # tests/test_x.py -> seconds

    @property
    def passed(self) -> bool:
        return self.failures == 0 and self.tests > 0


def read_junit(path: Path) -> Suite:
    """The totals of a JUnit XML file that pytest wrote (``--junitxml``)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = Suite(0.0, 0, 0, 0)
    for s in suites:
        total.seconds += float(s.get("time", 0))
        total.tests += int(s.get("tests", 0))
        total.failures += int(s.get("failures", 0)) + int(s.get("errors", 0))
        total.skipped += int(s.get("skipped", 0))
        for case in s.iter("testcase"):
            cls = case.get("classname", "")
            if cls.startswith("tests."):
                name = "tests/" + cls.split(".")[1] + ".py"
                total.by_file[name] = total.by_file.get(name, 0.0) + float(
                    case.get("time", 0))
    return total


def junit_name(job: str) -> str:
    """The XML file of a job: ``book/01-x.ipynb`` -> ``01-x.xml``."""
    return Path(job).stem + ".xml"


# ---------------------------------------------------------------- estimates


def estimates(junit_dir: Path | None) -> dict[str, float]:
    """Seconds per notebook and per test file: the last run's, else the committed."""
    est: dict[str, float] = {}
    if ESTIMATES.exists():
        data = json.loads(ESTIMATES.read_text())
        est.update({k: float(v) for k, v in data.get("seconds", {}).items()})
    if junit_dir and junit_dir.is_dir():
        for xml in junit_dir.glob("*.xml"):
            try:
                suite = read_junit(xml)
            except (ET.ParseError, OSError, ValueError):
                continue
            if suite.by_file:
                est.update(suite.by_file)
            else:
                est[xml.stem] = suite.seconds
        run = junit_dir / "run.json"   # jobs that write no JUnit XML (the book build)
        if run.exists():
            by_job = json.loads(run.read_text()).get("by_job", {})
            if BOOK_JOB in by_job:
                est[BOOK_JOB] = by_job[BOOK_JOB]["seconds"]
    return est


def seconds_of(job: str, est: dict[str, float]) -> float:
    return est.get(Path(job).stem, est.get(job, DEFAULT_S))


def pack(files: list[str], groups: int, est: dict[str, float]) -> list[list[str]]:
    """Test files into ``groups`` lists of about equal estimated time (LPT)."""
    bins: list[tuple[float, list[str]]] = [(0.0, []) for _ in range(max(1, groups))]
    for f in sorted(files, key=lambda f: -est.get(f, DEFAULT_S / 4)):
        i = min(range(len(bins)), key=lambda k: bins[k][0])
        bins[i] = (bins[i][0] + est.get(f, DEFAULT_S / 4), bins[i][1] + [f])
    return [sorted(b) for _, b in bins if b]


# ---------------------------------------------------------------- jobs


@dataclass
class Job:
    name: str          # what the report calls it
    argv: list[str]
    env: dict
    estimate: float
    junit: Path
    log: Path
    is_tests: bool = False
    seconds: float = 0.0
    status: str = "not run"
    worker: int = -1
    rerun: bool = False


def only_output_mismatches(job: Job) -> bool:
    """Whether a failed notebook job's log shows differing outputs and nothing else:
    no exception, no timeout, no error outside a cell comparison."""
    if job.is_tests or job.name == BOOK_JOB:
        return False
    text = job.log.read_text(errors="replace")
    failed = [line for line in text.splitlines() if line.startswith("FAILED ")]
    return bool(failed) and all("Cell outputs differ" in text and "::Cell" in line
                                for line in failed) and not any(
        bad in text for bad in ("Cell execution caused an exception", "Timeout",
                                "ERROR ", "Traceback (most recent call last)"))


BOOK_JOB = "book build"
TIMED_OUT = -1000  # launch's status of a job killed at its timeout (no exit status)


def make_jobs(mode: str, notebooks: list[str], test_groups: list[list[str]],
              junit_dir: Path, log_dir: Path, est: dict[str, float],
              book: bool = False) -> list[Job]:
    jobs = []
    if book:   # the full book build, then the browser test of it (neither needs a
        # test result; the record page is rebuilt after the run, with the run's times,
        # and checked again then)
        build = "source ci/_env.sh && build_book && ./ci/browser"
        jobs.append(Job(BOOK_JOB, ["bash", "-c", build], {},
                        est.get(BOOK_JOB, DEFAULT_S), junit_dir / "book.xml",
                        log_dir / "book-build.log"))
    for nb in notebooks:
        xml = junit_dir / junit_name(nb)
        argv = [*PYTEST, *FLAGS[mode], "--nbval-current-env",
                "--nbval-cell-timeout=900", f"--junitxml={xml}", nb]
        jobs.append(Job(nb, argv, {"BOOK_NOTEBOOK": nb}, seconds_of(nb, est), xml,
                        log_dir / (Path(nb).stem + ".log")))
    for k, files in enumerate(test_groups, 1):
        name = f"tests-{k}"
        xml = junit_dir / f"{name}.xml"
        argv = [*PYTEST, "-rs", f"--junitxml={xml}", *files]
        seconds = sum(est.get(f, DEFAULT_S / 4) for f in files)
        jobs.append(Job(f"{name} ({len(files)} files)", argv, {}, seconds, xml,
                        log_dir / f"{name}.log", is_tests=True))
    return sorted(jobs, key=lambda j: -j.estimate)


def kill_tree(pid: int) -> None:
    """SIGKILL a job's process group and every process it started, including those in
    a session of their own: jupyter_client starts a notebook's kernel with
    ``start_new_session=True``, out of the job's process group.  Returns once they
    have ended (or after 10 s)."""
    try:
        import psutil  # pinned in requirements.txt

        tree = psutil.Process(pid).children(recursive=True)
    except Exception:  # no psutil here, or the job has just ended
        tree = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in tree:
        try:
            child.kill()
        except Exception:  # it has ended meanwhile
            pass
    if tree:  # a SIGKILL is delivered when the process next runs: under load, later
        psutil.wait_procs(tree, timeout=10)


def positive_seconds(text: str) -> float:
    """argparse type: a job timeout, in seconds, above 0 and finite."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a job timeout in seconds, above 0 (BOOK_JOB_TIMEOUT_S)")
    return value


def run(jobs: list[Job], workers: int, timeout_s: float = JOB_TIMEOUT_S) -> list[Job]:
    """Run the jobs, ``workers`` at a time, in the order given; returns them done.
    A job still running after ``timeout_s`` is killed, with every process it started,
    and fails."""
    queue = list(jobs)
    lock = threading.Lock()
    running: dict[int, subprocess.Popen] = {}
    t_start = time.monotonic()

    def say(msg: str) -> None:
        with lock:
            print(f"[test] {time.monotonic() - t_start:5.0f} s  {msg}", flush=True)

    def launch(w: int, job: Job) -> int:
        """Run one job on worker ``w``, its output in its log; its exit status."""
        with open(job.log, "w") as log:
            proc = subprocess.Popen(job.argv, cwd=ROOT, env={**os.environ, **job.env},
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            with lock:
                running[w] = proc
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_tree(proc.pid)
                proc.wait()
                rc = TIMED_OUT
            with lock:
                running.pop(w, None)
        return rc

    def status(rc: int) -> str:
        if rc == TIMED_OUT:
            return (f"FAILED (killed after {timeout_s:.0f} s; BOOK_JOB_TIMEOUT_S or"
                    " --job-timeout sets the limit)")
        return "passed" if rc == 0 else f"FAILED (exit {rc})"

    def work(w: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                job = queue.pop(0)
            job.worker = w
            job.junit.unlink(missing_ok=True)
            say(f"start {job.name} (worker {w}, about {job.estimate:.0f} s)")
            t0 = time.monotonic()
            rc = launch(w, job)
            job.seconds = time.monotonic() - t0
            job.status = status(rc)
            if rc not in (0, TIMED_OUT) and only_output_mismatches(job):
                # ipykernel can publish a cell's last stream message after its idle
                # status on a loaded machine, and nbval then misses that output
                # (seen on CI: a cell's last three printed lines gone). Such a job is
                # run once more; the first log is kept, and the report names it.
                first = job.log.with_suffix(".first.log")
                job.log.replace(first)
                say(f"rerun  {job.name}: only output mismatches (log {first.name})")
                rc = launch(w, job)
                job.seconds = time.monotonic() - t0
                job.status = status(rc)
                job.rerun = True
            say(f"{job.status:>6} {job.name} in {job.seconds:.0f} s")

    threads = [threading.Thread(target=work, args=(w,), daemon=True)
               for w in range(1, workers + 1)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except KeyboardInterrupt:
        with lock:
            queue.clear()
            for proc in running.values():
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        raise
    return jobs


def test_files(root: Path = ROOT) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "tests").glob("test_*.py"))


def update_estimates(junit_dir: Path, note: str | None = None) -> int:
    est = estimates(junit_dir)
    old = json.loads(ESTIMATES.read_text()) if ESTIMATES.exists() else {}
    data = {"about": "seconds per job of one strict ./ci/test: notebooks and test "
                     "files from its JUnit XML, the book build from run.json (python "
                     "ci/pool.py --update-estimates --note '...'). The pool orders "
                     "its jobs by these when no earlier run is on disk; only ratios "
                     "matter.",
            "note": note if note is not None else old.get("note", ""),
            "seconds": {k: round(v, 1) for k, v in sorted(est.items())}}
    ESTIMATES.write_text(json.dumps(data, indent=1) + "\n")
    print(f"[pool] wrote {ESTIMATES.relative_to(ROOT)} ({len(est)} entries)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*")
    ap.add_argument("--mode", choices=sorted(FLAGS), default="strict")
    ap.add_argument("--tests", action="store_true", help="also the helper tests")
    ap.add_argument("--book", action="store_true", help="also the full book build")
    ap.add_argument("--test-jobs", type=int, default=2,
                    help="how many jobs the test files are packed into (default 2)")
    ap.add_argument("--workers", type=int,
                    default=int(os.environ.get("BOOK_TEST_WORKERS", "2")))
    ap.add_argument("--job-timeout", type=positive_seconds,
                    default=os.environ.get("BOOK_JOB_TIMEOUT_S", str(JOB_TIMEOUT_S)),
                    help="seconds after which a job is killed and fails")
    ap.add_argument("--junit-dir", type=Path, default=None)
    ap.add_argument("--update-estimates", action="store_true")
    ap.add_argument("--note", help="with --update-estimates: where it was measured")
    args = ap.parse_args(argv)
    junit_dir = args.junit_dir or ROOT / "_build" / "junit" / args.mode
    if args.update_estimates:
        return update_estimates(junit_dir, args.note)
    log_dir = ROOT / "_build" / "logs" / args.mode
    junit_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    est = estimates(junit_dir)
    groups = pack(test_files(), args.test_jobs, est) if args.tests else []
    jobs = make_jobs(args.mode, args.notebooks, groups, junit_dir, log_dir, est,
                     book=args.book)
    workers = max(1, min(args.workers, len(jobs)))
    print(f"[test] {len(jobs)} jobs on {workers} workers, longest first: "
          + ", ".join(f"{j.name} ~{j.estimate:.0f} s" for j in jobs), flush=True)
    t0 = time.monotonic()
    run(jobs, workers, args.job_timeout)
    wall = time.monotonic() - t0
    for job in jobs:
        if job.is_tests or job.status != "passed":
            log = job.log.relative_to(ROOT)
            print(f"\n[test] ---- {job.name}: {job.status} (log {log})")
            text = job.log.read_text(errors="replace")
            print(text if job.status != "passed" else _summary(text), end="")
    busy = sum(j.seconds for j in jobs)
    (junit_dir / "run.json").write_text(json.dumps(dict(
        mode=args.mode, jobs=len(jobs), workers=workers, cores=os.cpu_count(),
        wall_s=round(wall, 1), busy_s=round(busy, 1),
        by_job={j.name: dict(seconds=round(j.seconds, 1), worker=j.worker,
                             status=j.status) for j in jobs}), indent=1) + "\n")
    print(f"\n[test] jobs took {wall:.0f} s on {workers} workers "
          f"({busy:.0f} s of job time, {busy / max(wall, 1e-9) / workers:.0%} busy)")
    for job in sorted(jobs, key=lambda j: j.name):
        print(f"    {job.name:<40} {job.seconds:6.0f} s  worker {job.worker}  "
              f"{job.status}")
    reran = [j.name for j in jobs if j.rerun]
    if reran:
        print("[test] rerun once for output mismatches only (first logs *.first.log): "
              + ", ".join(f"{j.name} ({j.status})" for j in jobs if j.rerun))
    failed = [j.name for j in jobs if j.status != "passed"]
    if failed:
        print(f"[test] FAILED jobs: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _summary(text: str) -> str:
    """The end of a passing pytest log: its skip reasons and its last line."""
    lines = text.rstrip().splitlines()
    keep = [ln for ln in lines if ln.startswith("SKIPPED")] + lines[-1:]
    return "\n".join(keep) + "\n"


if __name__ == "__main__":
    sys.exit(main())
