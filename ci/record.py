"""Write the book's own record: versions, device configuration and notebook run times.

  python ci/record.py --ensure          keep a test run's record, else write one
  python ci/record.py --junit DIR       write it with the run times of the test run
                                        (the JUnit XML that ./ci/test's pytest wrote)
  python ci/record.py --check-html F    fail unless the built page F shows run times
  python ci/record.py --times DIR       print each notebook's time and result

The page book/record.md includes the generated file book/_generated/record.md: the
versions, the run times, what a real GPU measured and which pages ran on which GPU
(the GPU data files of ``lab/gpu_check``, read here).  It is
made by the test run (./ci/test), never typed by hand, and it is not committed.  A
record written without timings has no run-times section at all: the page's prose says
where run times come from, and a build without tests ships no placeholder.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import junit
import notebooks as nbs

from shardbook import gpudata
from shardbook.gpudata import gpu_data

ROOT = nbs.ROOT
OUT = ROOT / "book" / "_generated" / "record.md"
PACKAGES = [
    "brainpy", "brainstate", "brainevent", "braintools", "brainunit", "jax", "jaxlib",
    "numpy", "orbax-checkpoint", "scikit-learn", "matplotlib", "numba", "nbval",
    "jupyter-book", "myst-nb",
]
# The run-times section: its heading, and the header row of its table.
TIMES_HEADING = "Notebook run times"
TIMES_HEADER = "| notebook | seconds | result |"
# The GPU data files (lab/gpu_check writes them), and the mode a GPU run runs pages in
DATA_DIR = ROOT / "book" / "data"
MODE = "nbval-lax"


def pinned() -> dict:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def versions_table() -> list[str]:
    pins = pinned()
    rows = ["| package | installed | pinned in requirements.txt |",
            "| --- | --- | --- |"]
    for name in PACKAGES:
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = "not installed"
        want = pins.get(name.lower(), "")
        mark = "" if have == want else " (differs)"
        rows.append(f"| {name} | {have}{mark} | {want} |")
    return rows


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def time_rows(junit_dir: Path) -> list[str]:
    """One table row per notebook, in reading order, from a test run's JUnit XML
    (``notebooks.xml``, then ``notebooks-rerun.xml`` for what ran again); the total."""
    xmls = [junit_dir / f"{n}.xml" for n in ("notebooks", "notebooks-rerun")]
    runs = junit.notebooks(*[x for x in xmls if x.exists()])
    rows, total = [], 0.0
    for path in nbs.relative(nbs.notebooks()):
        if path not in runs:
            continue
        nb = runs[path]
        total += nb.seconds
        status = ("passed" if nb.passed
                  else f"FAILED ({len(nb.failures)} of {nb.cells} cells)")
        rows.append(f"| `{path}` | {nb.seconds:.0f} | {status} |")
    return rows + [f"| **total** | {total:.0f} | |"] if rows else []


def times_table(junit_dir: Path) -> list[str]:
    """The run-times section of the record page."""
    rows = time_rows(junit_dir)
    if not rows:
        return []
    workers = os.environ.get("BOOK_TEST_WORKERS", "several")   # ci/test exports it
    return [
        "", f"## {TIMES_HEADING}", "",
        "Each notebook executed top to bottom in a fresh kernel under strict nbval "
        "(every stored output compared with the fresh run); the times are pytest's "
        f"(JUnit XML). pytest-xdist ran {workers} "
        f"notebooks at a time on {os.cpu_count()} CPU cores, after the helper tests "
        "and beside the book build: a notebook's time includes what ran beside it.",
        "",
        TIMES_HEADER, "| --- | ---: | --- |", *rows,
    ]


def gpu_lines() -> list[str]:
    """What a real GPU measured (``lab/gpu_check``'s data file), or that nothing has:
    the note, and the GPU run's figures."""
    data = gpu_data("h200")
    said = gpudata.note(data)
    lines = ["## Real-GPU measurements", "", said[:1].upper() + said[1:] + "."]
    if data is None:
        return lines
    prov = data["provenance"]
    differ = gpudata.mismatch_text(data)
    lines += ["", f"Command: `{prov['command']}`; driver: {prov['driver']}; "
              f"versions that differ from the book's pins: {differ}.", "",
              "| neurons | delivery | us per step | events per step | compile (s) |",
              "| ---: | --- | ---: | ---: | ---: |"]
    for n, conn, us, events, seconds in gpudata.coba_rows(data):
        lines.append(f"| {n:,} | {conn} | {us:,.1f} | {events:,.0f} | {seconds:.1f} |")
    ten = data["timing"].get("coba_10s")
    if ten:   # beside BrainPy's published figures: chapter 4b, with what differs
        lines += ["", f"{ten['simulated_s']:g} s of simulated time at "
                  f"{ten['neurons']:,} neurons ({ten['conn']} delivery): "
                  f"{ten['run_s']:.1f} s of wall time, compile "
                  f"{ten['compile_s']:.1f} s apart (chapter 4b sets it beside "
                  "BrainPy's published figures)."]
    return lines


PAGES_HEADING = "Pages executed on a GPU"
PAGES_HEADER = "| page | result | seconds | GPU | JAX | date | commit |"
NO_PAGES = "No page of the book has been executed on a GPU yet."


def _cell(text: str, width: int = 110) -> str:
    """One table cell: no pipe, no newline, at most ``width`` characters."""
    text = " ".join(str(text).replace("|", "/").split())
    return text if len(text) <= width else text[:width - 3] + "..."


# ------------------------------------------------- the GPU data files, read
def data_files(data_dir: Path = DATA_DIR) -> list[Path]:
    """The GPU data files of the book: ``book/data/gpu_<device>.json`` (not the
    GPU-target prediction, not the earlier runs kept under ``earlier/``)."""
    return sorted(p for p in data_dir.glob("gpu_*.json")
                  if not p.name.startswith("gpu_target_"))


def executed_pages(data_dir: Path = DATA_DIR) -> tuple[dict, list[dict]]:
    """``({page: row}, runs)``: for each page, the row of the newest GPU run that
    executed it (ok, failed or timeout; the row carries its device, JAX, date and
    commit); ``runs``: the provenance of every GPU data file, newest first."""
    pages, runs = {}, []
    for path in data_files(data_dir):
        data = json.loads(path.read_text())
        if data.get("dry_run"):
            continue
        prov = data.get("provenance", {})
        runs.append(dict(file=path.name, device=prov.get("device_kind"),
                         date=prov.get("date") or "", commit=prov.get("commit"),
                         jax=prov.get("versions", {}).get("jax"),
                         notebooks=(data.get("phases", {}).get("notebooks") or {})
                         .get("status")))
        for row in data.get("notebooks") or []:
            if row.get("status") == "skipped" or row.get("mode") != MODE:
                continue   # not run, or run as a script before lax nbval (not a page)
            row = dict(row, device=row.get("device") or prov.get("device_kind"),
                       jax=row.get("jax") or prov.get("versions", {}).get("jax"),
                       date=row.get("date") or prov.get("date") or "",
                       commit=row.get("commit") or prov.get("commit"))
            if row["path"] not in pages or row["date"] > pages[row["path"]]["date"]:
                pages[row["path"]] = row
    runs.sort(key=lambda r: r["date"], reverse=True)
    return pages, runs


def crossover_lines(block: dict) -> list[str]:
    """The comparison as plain text (the run's log)."""
    def us(x):
        return "-" if x is None else f"{x * 1e6:,.1f}"

    out = [f"{'neurons':>10} {'push us':>9} {'index us':>9} {'faster':>7} | "
           f"earlier: {'push us':>9} {'index us':>9} {'faster':>7}"]
    for r in block["rows"]:
        a, b = r["now"], r["earlier"]
        out.append(f"{r['neurons']:>10,} {us(a['push_s']):>9} {us(a['index_s']):>9} "
                   f"{a['faster'] or '-':>7} | {'':8} {us(b['push_s']):>9} "
                   f"{us(b['index_s']):>9} {b['faster'] or '-':>7}")
    return out


def gpu_pages_lines(data_dir: Path | None = None) -> list[str]:
    """Which pages were last executed on which GPU with which JAX (``lab/gpu_check``
    runs them under lax nbval and writes a row per page), or that none has been."""
    pages, runs = executed_pages(data_dir or DATA_DIR)
    lines = [f"### {PAGES_HEADING}", ""]
    if not pages:
        said = NO_PAGES
        if runs:
            r = runs[0]
            said += (f" The last GPU run (1 x {r['device']}, {r['date'][:10]}, commit "
                     f"{str(r['commit'])[:12]}) measured the figures above, and ran "
                     f"no page (its notebooks phase: {r['notebooks'] or 'absent'}).")
        return lines + [said + " `lab/gpu_check` runs every page under lax nbval on a "
                        "GPU and records each page's result here."]
    listed = nbs.relative(nbs.notebooks())
    order = [*listed, *sorted(p for p in pages if p not in listed)]
    lines += ["Each page ran top to bottom in a fresh kernel on the GPU named, under "
              "lax nbval: every cell executed and every assert checked, stored outputs "
              "not compared (they are the canonical CPU run's). The newest run of each "
              "page is shown; a page never run on a GPU says so.", "",
              PAGES_HEADER, "| --- | --- | ---: | --- | --- | --- | --- |"]
    for path in order:
        row = pages.get(path)
        if row is None:
            lines.append(f"| `{path}` | not run on a GPU yet | | | | | |")
            continue
        result = row["status"]
        if row["status"] != "ok" and row.get("error"):
            result += f": {_cell(row['error'])}"
        lines.append(f"| `{path}` | {result} | {row['wall_s']:.0f} | "
                     f"{_cell(row['device'])} | {row['jax']} | {row['date'][:10]} | "
                     f"`{str(row['commit'])[:12]}` |")
    return lines


def gpu_crossover_lines(data_dir: Path | None = None) -> list[str]:
    """Each GPU run's push / index times beside the earlier run it names (the file's
    ``crossover``), or nothing where no run has one."""
    lines = []
    for path in data_files(data_dir or DATA_DIR):
        data = json.loads(path.read_text())
        cross = data.get("crossover") or {}
        if data.get("dry_run") or not cross.get("rows"):
            continue
        prov, was = data["provenance"], cross.get("earlier") or {}
        lines += ["", f"Push and index delivery on 1 x {prov['device_kind']} "
                  f"({prov['date'][:10]}, JAX {prov['versions'].get('jax')}, "
                  f"`{path.name}`) beside the run on 1 x {was.get('device')} "
                  f"({str(was.get('date'))[:10]}, JAX {was.get('jax')}), "
                  "microseconds per step:", "", "```text",
                  *crossover_lines(cross), "```"]
    return lines


def write(junit_dir: Path | None, out: Path = OUT) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Generated by `ci/record.py` on {now}, from commit `{git_commit()}`.",
        "",
        "## Configuration",
        "",
        f"- Python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPU cores.",
        f"- Devices: `JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '(unset)')}`, "
        f"`BOOK_NUM_DEVICES={os.environ.get('BOOK_NUM_DEVICES', '(unset)')}` "
        "(the canonical configuration is CPU with 8 simulated devices).",
        "",
        "## Versions",
        "",
        *versions_table(),
    ]
    if junit_dir and junit_dir.is_dir():
        lines += times_table(junit_dir)
    lines += ["", *gpu_lines(), *gpu_crossover_lines(), "", *gpu_pages_lines()]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"[record] wrote {out}")


def check_html(page: Path) -> int:
    """0 if the built record page shows the run times of a test run, else 1."""
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    if TIMES_HEADING in text and "<td>" in text.split(TIMES_HEADING, 1)[1]:
        print(f"[record] {page} shows the notebook run times")
        return 0
    print(f"[record] {page} has no notebook run times: build it with ./ci/test")
    return 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ensure", action="store_true")
    ap.add_argument("--junit", type=Path, help="the JUnit XML folder of a test run")
    ap.add_argument("--check-html", type=Path)
    ap.add_argument("--times", type=Path, help="print the run times of that folder")
    args = ap.parse_args()
    if args.times:
        rows = time_rows(args.times)   # none for notebooks outside _toc.yml
        if rows:
            print("\n".join([TIMES_HEADER, *rows]))
        return 0
    if args.check_html:
        return check_html(args.check_html)
    if args.ensure and OUT.exists() and TIMES_HEADER in OUT.read_text():
        return 0  # keep the record of the last test run, with its run times
    write(args.junit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
