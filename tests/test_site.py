"""The book as a reader meets it online: configuration, links, Binder, workflows.

Nothing is downloaded and the book is not built.  Most tests read files; a few run
a small program on planted input: ``.ci/run`` over a stub ``./ci/test``, actionlint,
the link checker, and a real browser (skipped where no Chromium is installed; ci/browser
runs the same planted-bug check before it checks the book).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))
sys.path.insert(0, str(ROOT / "_ext"))

import background  # noqa: E402
import browser_test  # noqa: E402
import check_notebooks  # noqa: E402
import notebooks as nbs  # noqa: E402
import record  # noqa: E402
import site_fixes  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]  # the one place the repository URL is set
NOTEBOOKS = nbs.notebooks()  # _toc.yml's, in reading order
GITHUB = re.compile(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
SELF_LINK = re.compile(
    r"https://github\.com/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/(?:blob|tree|raw)/"
    r"[^/\s\"')]+/([^\s\"')#?]+)"
)


def _first_code_cell(path: Path) -> str:
    return nbs.source(nbs.first_code_cell(nbs.load(path)))


def test_every_notebook_is_in_the_table_of_contents():
    assert NOTEBOOKS, "no notebook found through _toc.yml"
    assert nbs.orphans() == [], "notebooks that _toc.yml does not list are never built"
    names = [p.name for p in NOTEBOOKS]
    assert names[0] == "00-quick-start.ipynb" and len(set(names)) == len(names)
    assert names[1].startswith("01-")


# ------------------------------------------------------------ repository URL


def test_repository_url_is_a_github_repository():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", REPO_URL), REPO_URL


def test_readme_and_pyproject_follow_the_repository_url():
    readme = (ROOT / "README.md").read_text()
    assert REPO_URL in readme, f"README.md must name the repository, {REPO_URL}"
    wrong = [u for u in GITHUB.findall(readme) if _is_ours(u) and u != REPO_URL]
    assert not wrong, f"README.md names another repository URL: {wrong}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for name, url in project.get("urls", {}).items():
        if "github.com" in url:
            assert url.startswith(REPO_URL), f"pyproject.toml urls.{name}: {url}"


def test_config_launch_settings_follow_the_repository_url():
    from jupyter_book.config import get_final_config

    final, _ = get_final_config(
        user_yaml=ROOT / "_config.yml",
        sourcedir=ROOT,
        cli_config={"latex_individualpages": False},
        raise_on_invalid=True,
    )
    theme = final["html_theme_options"]
    assert theme["repository_url"] == REPO_URL
    assert theme["repository_branch"] == "main"
    assert theme["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    assert theme["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert theme["launch_buttons"]["thebe"] is True
    assert "sphinx_thebe" in final["extensions"]
    # The theme fixes are in force (recursive_update keeps the launch buttons too).
    assert theme["navbar_persistent"] == []
    assert "site_fixes" in final["extensions"]
    assert final["html_context"]["default_mode"] == "light"
    assert "book.css" in final["html_css_files"]  # long inline code wraps on phones


def _is_ours(url: str) -> bool:
    """A GitHub URL that means this repository: same owner, or same owner/name."""
    owner = REPO_URL.rstrip("/").split("/")[-2]
    return url.split("/")[3] == owner


@pytest.mark.parametrize("path", nbs.helper_notebooks(), ids=lambda p: p.name)
def test_notebook_install_cell_follows_the_repository_url(path):
    """The first code cell installs shardbook from exactly this repository."""
    src = _first_code_cell(path)
    want = f"git+{REPO_URL}"
    assert re.search(re.escape(want) + r"(?![\w/.-])", src), (
        f"{path.name}: the first code cell must install shardbook from {want} "
        f"(the repository URL in _config.yml)"
    )
    assert "%pip install" in src and "shardbook[" in src, path.name
    for url in GITHUB.findall(src):
        assert url == REPO_URL, f"{path.name}: first cell names {url}"


def _text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    keep = (".md", ".ipynb", ".py", ".sh", ".sbatch", ".toml", ".yml", ".txt")
    return [ROOT / f for f in out if f.endswith(keep) and (ROOT / f).is_file()]


def test_links_to_files_of_this_repository_follow_the_repository_url():
    """A GitHub link to a file that exists here, or a pip git+ URL, must be ours."""
    problems = []
    for path in _text_files():
        text = path.read_text(errors="replace")
        for repo, file in SELF_LINK.findall(text):
            if (ROOT / file).exists() and f"https://github.com/{repo}" != REPO_URL:
                problems.append(f"{path.relative_to(ROOT)}: {repo}/.../{file}")
        for url in re.findall(r"git\+(https://github\.com/[\w.-]+/[\w.-]+)", text):
            if url != REPO_URL and "shardbook" in text:
                problems.append(f"{path.relative_to(ROOT)}: git+{url}")
    assert not problems, f"links that do not follow {REPO_URL}: {problems}"


# ------------------------------------------------------------ Binder and Thebe


def _requirements(path: Path) -> set[str]:
    """The pins of a requirements file, following -r includes."""
    pins = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            pins |= _requirements((path.parent / line.split(None, 1)[1]).resolve())
        elif line:
            pins.add(line)
    return pins


def test_binder_environment_is_the_books_pinned_environment():
    binder = ROOT / "binder"
    assert _requirements(binder / "requirements.txt") == _requirements(
        ROOT / "requirements.txt"
    ), "binder/requirements.txt must install exactly requirements.txt"
    # repo2docker reads runtime.txt as python-X.Y; the book needs 3.11 or newer.
    runtime = (binder / "runtime.txt").read_text().strip()
    assert re.fullmatch(r"python-3\.(1[1-9])", runtime), runtime
    ci = yaml.safe_load((ROOT / ".github/workflows/book.yml").read_text())
    steps = ci["jobs"]["test"]["steps"]
    versions = [
        s["with"]["python-version"]
        for s in steps
        if "setup-python" in s.get("uses", "")
    ]
    assert versions == [runtime.removeprefix("python-")], "Binder and CI: one Python"
    lock = re.search(r"^want=(\S+)$", (ROOT / "ci" / "lock").read_text(), re.M)
    assert lock and lock[1] == versions[0], "ci/lock resolves for CI's Python"


def test_binder_postbuild_installs_shardbook_without_dependencies():
    post = ROOT / "binder" / "postBuild"
    assert post.stat().st_mode & stat.S_IXUSR, "binder/postBuild must be executable"
    text = post.read_text()
    assert text.startswith("#!/bin/bash")
    assert re.search(r"pip install .*--no-deps.* -e \.", text), text
    start = ROOT / "binder" / "start"
    assert start.stat().st_mode & stat.S_IXUSR, "binder/start must be executable"
    assert 'exec "$@"' in start.read_text()
    assert "BOOK_NUM_DEVICES=8" in start.read_text()


# ------------------------------------------------------------ theme fixes


def test_inline_scripts_are_written_once():
    from sphinx.builders.html._assets import _JavaScript

    body = 'const THEBE_JS_URL = "x"'
    files = [
        _JavaScript("a.js"),
        _JavaScript(None, body=body),
        _JavaScript("", body=body),
        _JavaScript("a.js"),
        _JavaScript("b.js"),
    ]
    context = {"script_files": files}
    site_fixes.dedupe_inline_scripts(context)
    assert [j.filename for j in context["script_files"]] == [
        "a.js",
        None,
        "a.js",
        "b.js",
    ]


def test_footer_links_are_relative_to_the_site_root():
    def pathto(target, resource=0):
        assert resource
        return "../" + target  # as from a page one folder down

    context = {
        "theme_extra_footer": "see <a href='book/record.html'>it</a>, "
        "<a href=\"https://x.org/a\">x</a> <a href='#top'>top</a>",
        "pathto": pathto,
    }
    site_fixes.footer_links_from_root(context)
    footer = context["theme_extra_footer"]
    assert "href='../book/record.html'" in footer
    assert 'href="https://x.org/a"' in footer and "href='#top'" in footer


def test_neighbouring_streams_merge_and_keep_their_order():
    outs = [
        {"output_type": "stream", "name": "stdout", "text": "title 1\n"},
        {"output_type": "display_data", "data": {"text/html": "grid 1"}},
        {"output_type": "stream", "name": "stdout", "text": "title 2\n"},
        {"output_type": "stream", "name": "stdout", "text": "more 2\n"},
        {"output_type": "stream", "name": "stderr", "text": "warn\n"},
        {"output_type": "display_data", "data": {"text/html": "grid 2"}},
    ]
    before = json.dumps(outs)
    merged = site_fixes.merge_neighbouring_streams(outs)
    assert [o.get("text", o.get("data", {}).get("text/html")) for o in merged] == [
        "title 1\n",
        "grid 1",
        "title 2\nmore 2\n",
        "warn\n",
        "grid 2",
    ]
    assert json.dumps(outs) == before, "the notebook's outputs must not change"
    assert site_fixes.merge_neighbouring_streams(outs) == merged


# ------------------------------------------------------------ record page


def test_record_without_timings_ships_no_placeholder(tmp_path):
    out = tmp_path / "record.md"
    record.write(None, out)
    text = out.read_text()
    assert "Not measured" not in text and record.TIMES_HEADING not in text
    assert "## Versions" in text
    page = (ROOT / "book" / "record.md").read_text()
    assert "Run times come from the test run" in page


def _junit(path: Path, cells: dict) -> None:
    """A JUnit XML file as nbval writes it: ``{notebook: [(seconds, failed), ...]}``."""
    cases = "".join(
        f'<testcase classname="{nb.replace("/", ".")}" name="Cell {i}" time="{t}">'
        + ('<failure message="Cell outputs differ"/>' if bad else "") + "</testcase>"
        for nb, rows in cells.items() for i, (t, bad) in enumerate(rows))
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites>'
                    f'<testsuite name="pytest">{cases}</testsuite></testsuites>')


def test_record_with_timings_shows_them(tmp_path):
    """The run times come from the JUnit XML of the notebooks' run, and a rerun's
    result replaces the first."""
    first, second, third = nbs.relative(NOTEBOOKS[:3])
    _junit(tmp_path / "notebooks.xml", {first: [(6.2, False)] * 2,
                                        second: [(9.9, False)] * 3,
                                        third: [(1.0, True), (1.0, False)]})
    _junit(tmp_path / "notebooks-rerun.xml", {second: [(9.9, False), (0.0, True)]})
    out = tmp_path / "record.md"
    record.write(tmp_path, out)
    text = out.read_text()
    assert record.TIMES_HEADER in text and "| **total** | 24 | |" in text
    assert f"| `{first}` | 12 | passed |" in text
    assert f"| `{second}` | 10 | FAILED (1 of 2 cells) |" in text
    assert f"| `{third}` | 2 | FAILED (1 of 2 cells) |" in text
    html = tmp_path / "record.html"
    html.write_text(f"<h2>{record.TIMES_HEADING}</h2><table><td>12</td></table>")
    assert record.check_html(html) == 0
    html.write_text("<h2>Versions</h2><table><td>1.0</td></table>")
    assert record.check_html(html) == 1


# ------------------------------------------------------------ workflows


def test_every_workflow_passes_actionlint():
    if not (ROOT / ".venv/bin/actionlint").exists() and not shutil.which("actionlint"):
        pytest.skip("actionlint is not installed (it is pinned in requirements.txt)")
    run = _lint("lint_workflows")
    assert run.returncode == 0, run.stdout + run.stderr


def _lint(script: str, *files: Path) -> subprocess.CompletedProcess:
    """``ci/<script> [FILE ...]``, run from the repository."""
    return subprocess.run([str(ROOT / "ci" / script), *map(str, files)], cwd=ROOT,
                          capture_output=True, text=True)


def test_actionlint_checks_the_bash_of_a_workflows_steps(tmp_path):
    """Planted: an unquoted variable in a `run:` step (ShellCheck's SC2086)."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: rm -rf $HOME/$1\n")
    run = _lint("lint_workflows", bad)
    assert run.returncode != 0 and "SC2086" in run.stdout, run.stdout + run.stderr


def _bash_scripts() -> list[str]:
    """Every tracked file whose first line names bash or sh, and the sourced env."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    found = ["ci/_env.sh"]
    for name in tracked:
        path = ROOT / name
        if path.is_file() and path.read_bytes()[:2] == b"#!":
            first = path.read_text(errors="replace").splitlines()[0]
            if re.search(r"[/ ](ba)?sh( |$)", first):
                found.append(name)
    return found


def test_every_shell_script_passes_shellcheck():
    scripts = _bash_scripts()
    assert {"ci/test", ".ci/run", "ci/lint_shell", "recipes/slurm_gpu.sbatch"} <= set(
        scripts)
    run = _lint("lint_shell")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"shellcheck passed on {len(scripts)} scripts" in run.stdout


def test_shellcheck_fails_a_planted_script(tmp_path):
    """Planted: an unquoted argument (SC2086) and a sourced file it cannot find."""
    bad = tmp_path / "bad"
    bad.write_text('#!/usr/bin/env bash\nsource "$(dirname "$0")/gone.sh"\n'
                   'rm -rf $1/build\n')
    run = _lint("lint_shell", bad)
    assert run.returncode != 0, run.stdout
    assert "SC2086" in run.stdout and "SC1091" in run.stdout, run.stdout


WORKFLOW = ROOT / ".github/workflows/book.yml"


def test_one_workflow_tests_every_push_and_publishes_that_build():
    """The suite runs once per push; on main, Pages gets the build that was tested."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML reads a bare `on` as True
    assert "push" in on and "pull_request" in on
    # a pull request from a branch of this repository: its push ran the suite already
    assert " ".join(wf["jobs"]["test"]["if"].split()) == (
        "github.event_name != 'pull_request' || "
        "github.event.pull_request.head.repo.full_name != github.repository")
    assert wf["permissions"] == {"contents": "read"}
    steps = wf["jobs"]["test"]["steps"]
    runs = [s.get("run", "") for s in steps]
    uses = [s.get("uses", "") for s in steps]
    test = runs.index(".ci/run")
    upload = next(i for i, u in enumerate(uses) if "upload-pages-artifact" in u)
    assert test < upload, "test, then upload what was tested"
    assert steps[upload]["with"]["path"] == "_build/html"
    assert steps[upload]["if"] == "github.ref == 'refs/heads/main'"
    deploy = wf["jobs"]["deploy"]
    assert deploy["needs"] == "test"
    assert deploy["if"] == "github.ref == 'refs/heads/main'"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert any("actions/deploy-pages" in s.get("uses", "") for s in deploy["steps"])
    assert not any("run" in s for s in deploy["steps"]), "deploy runs nothing again"
    # ./ci/test itself checks that the record page carries the run's times
    assert (
        "record.py --check-html _build/html/book/record.html"
        in (ROOT / "ci" / "test").read_text()
    )
    # no other workflow runs the CPU suite (gpu.yml runs ./ci/test --gpu)
    for other in (ROOT / ".github/workflows").glob("*.yml"):
        if other != WORKFLOW:
            text = other.read_text()
            assert ".ci/run" not in text, other.name
            assert not re.search(r"ci/test\s*$", text, re.M), other.name


def _ci_run(tmp_path, **env_vars):
    """CI's .ci/run over a stub ./ci/test that takes no time; STUB_FAIL=MODE makes
    the stub fail in that mode ("strict" or "--portable")."""
    (tmp_path / ".ci").mkdir(exist_ok=True)
    (tmp_path / "ci").mkdir(exist_ok=True)
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    stub = tmp_path / "ci" / "test"
    stub.write_text('#!/usr/bin/env bash\necho "[stub] ${1:-strict}"\n'
                    '[[ "${STUB_FAIL:-}" != "${1:-strict}" ]] || exit 3\n')
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOOK_")}
    env.update(CI="")   # not GitHub Actions, unless a test says so
    env.update({k: str(v) for k, v in env_vars.items()})
    return subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=env,
                          capture_output=True, text=True, timeout=60)


def test_ci_run_reports_a_run_over_its_time_budget(tmp_path):
    """.ci/run says so when ./ci/test takes over 10 minutes, or the whole over 20, and
    fails such a run with BOOK_ENFORCE_BUDGET=1 only. A budget of -1 s is one that
    every run overruns, with no waiting."""
    text = (ROOT / ".ci" / "run").read_text()
    assert "BOOK_TEST_BUDGET_S:-600}" in text and "BOOK_RUN_BUDGET_S:-1200}" in text
    for env in ({}, {"BOOK_ENFORCE_BUDGET": 1}):  # within the budget: passes
        ok = _ci_run(tmp_path, **env)
        assert ok.returncode == 0 and "[ci]" not in ok.stderr, ok.stderr
        assert "[stub] strict" in ok.stdout and "[stub] --portable" in ok.stdout
        assert "within the time budget" in ok.stdout
    both = dict(BOOK_TEST_BUDGET_S=-1, BOOK_RUN_BUDGET_S=-1)  # planted: both overrun
    slow = _ci_run(tmp_path, **both)
    assert slow.returncode == 0 and "within the time budget" not in slow.stdout
    assert "[stub] --portable" in slow.stdout  # the gate still ran: the log shows both
    lines = [ln for ln in slow.stderr.splitlines() if "OVER THE TIME BUDGET" in ln]
    assert len(lines) == 2, slow.stderr  # one line each
    assert re.fullmatch(r"\[ci\] OVER THE TIME BUDGET: \./ci/test took \d+ s, over its "
                        r"-1 s", lines[0])
    assert re.fullmatch(r"\[ci\] OVER THE TIME BUDGET: \.ci/run took \d+ s, over its "
                        r"-1 s", lines[1])
    whole = _ci_run(tmp_path, BOOK_RUN_BUDGET_S=-1, BOOK_ENFORCE_BUDGET=1)
    assert whole.returncode == 1
    assert re.search(r"\[ci\] FAILED: \.ci/run took \d+ s, over its -1 s", whole.stderr)
    assert "./ci/test took" not in whole.stderr  # only the budget that was overrun
    assert "::" not in slow.stdout + whole.stdout   # no annotation off GitHub Actions
    # on GitHub Actions (CI=true): an annotation too, an error when the run fails
    gha = [ln for ln in _ci_run(tmp_path, CI="true", **both).stdout.splitlines()
           if ln.startswith("::")]
    assert len(gha) == 2 and all(
        re.fullmatch(rf"::warning title=\.ci/run::OVER THE TIME BUDGET: {what} "
                     r"took \d+ s, over its -1 s", ln)
        for ln, what in zip(gha, (r"\./ci/test", r"\.ci/run"))), gha
    gha = _ci_run(tmp_path, CI="true", BOOK_RUN_BUDGET_S=-1, BOOK_ENFORCE_BUDGET=1)
    assert re.search(r"^::error title=\.ci/run::FAILED: \.ci/run took \d+ s, over its "
                     r"-1 s$", gha.stdout, re.M), gha.stdout
    assert "::" not in _ci_run(tmp_path, CI="true").stdout   # within: none


def test_ci_run_refuses_a_bad_budget_and_times_a_failed_gate(tmp_path):
    for name, value in (("BOOK_TEST_BUDGET_S", "10m"), ("BOOK_RUN_BUDGET_S", "08"),
                        ("BOOK_RUN_BUDGET_S", "-5"), ("BOOK_ENFORCE_BUDGET", "true")):
        got = _ci_run(tmp_path, **{name: value})  # "08": octal to bash, no number
        assert got.returncode == 2 and f"{name}={value}:" in got.stderr, got.stderr
        assert "[stub]" not in got.stdout  # refused before any gate ran
    failed = _ci_run(tmp_path, STUB_FAIL="--portable")
    assert failed.returncode == 3 and "[stub] --portable" in failed.stdout
    assert re.search(r"\[ci\] exit 3 after \d+ s", failed.stderr)
    assert "--portable took" not in failed.stdout and "BUDGET" not in failed.stderr


def test_workflow_keeps_the_screenshots_and_the_test_logs():
    wf = yaml.safe_load(WORKFLOW.read_text())
    paths = [s.get("with", {}).get("path") for s in wf["jobs"]["test"]["steps"]]
    assert "_build/screenshots" in paths
    steps = wf["jobs"]["test"]["steps"]
    run = next((s for s in steps if s.get("run") == ".ci/run"), {})
    assert run.get("env", {}).get("BOOK_SCREENSHOTS") == "1"  # else none are taken
    assert any(p and "_build/junit" in p for p in paths)


# ------------------------------------------------------------ link and browser checks


def test_link_checker_reports_a_missing_image_and_anchor(tmp_path):
    site = browser_test.planted_site(tmp_path)
    (site / "more.html").write_text(
        '<a href="index.html#nowhere">x</a>'
        '<a href="wide.html">ok</a><p id="here"></p>'
        '<a href="#here">ok</a>'
    )
    problems = browser_test.check_links(site)
    assert any("figure.png: no such file" in p for p in problems), problems
    assert any("#nowhere" in p and "no anchor" in p for p in problems), problems
    assert len(problems) == 2, problems


def test_every_page_of_the_toc_must_be_built(tmp_path):
    pages = [p.relative_to(ROOT) for p in nbs.pages()]
    for rel in pages:
        (tmp_path / rel.with_suffix(".html")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel.with_suffix(".html")).write_text("<html></html>")
        if rel.suffix == ".ipynb":
            (tmp_path / "_sources" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "_sources" / rel).write_text("{}")
    assert browser_test.missing_pages(tmp_path) == []
    gone, plain = NOTEBOOKS[-1].relative_to(ROOT), NOTEBOOKS[0].relative_to(ROOT)
    (tmp_path / gone.with_suffix(".html")).unlink()
    (tmp_path / "_sources" / plain).unlink()
    assert browser_test.missing_pages(tmp_path) == [
        f"{plain.with_suffix('.html')}: not built from its notebook",
        f"{gone.with_suffix('.html')}: not built (it is in _toc.yml)",
    ]


def test_browser_test_fails_on_a_missing_image_a_wide_page_and_an_error(tmp_path):
    background.wait_for_install()  # ./ci/test may be installing chromium
    chromium = browser_test.find_chromium()
    if not chromium:
        pytest.skip("no Chromium installed (ci/browser installs Debian's chromium)")
    pytest.importorskip("playwright")
    site = browser_test.planted_site(tmp_path / "site")
    problems = browser_test.check_pages(
        site, tmp_path / "shots", chromium, search_word=None
    )
    assert any(
        p.startswith("index.html: image not loaded: figure.png") for p in problems
    ), problems
    assert any(p.startswith("wide.html: scrolls sideways by") for p in problems)
    assert any(p.startswith("script.html: page error:") for p in problems)
    phone = [p for p in problems if p.startswith("phone.html")]
    assert len(phone) == 1 and phone[0].endswith("px at 400 px"), phone
    assert not any(p.startswith("wide.html: image") for p in problems)
    assert any(
        p.startswith("narrow-code.html: a code line of 88 characters does not fit")
        for p in problems
    )
    assert sorted(os.listdir(tmp_path / "shots")) == [
        "index.jpg",
        "narrow-code.jpg",
        "phone.jpg",
        "script.jpg",
        "wide.jpg",
    ]
    # (browser_test.self_test, the same planted site in a second browser run, is
    # what ./ci/browser runs first in every ./ci/test: not repeated here)


# ------------------------------------------------------------ notebook line lengths


def _notebook(path: Path, cells: list[dict]) -> Path:
    path.write_text(
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    return path


def _code(source: str, outputs=(), tags=()) -> dict:
    return {
        "cell_type": "code",
        "source": source,
        "outputs": list(outputs),
        "metadata": {"tags": list(tags)},
        "execution_count": None,
    }


def test_notebook_checker_catches_long_output_lines(tmp_path, capsys):
    long_code = "x = " + "1 + " * 30 + "1"  # 126 characters: ruff's business, not this
    nb = _notebook(
        tmp_path / "bad.ipynb",
        [
            {"cell_type": "markdown", "source": "a" * 200, "metadata": {}},
            _code("ok = 1\n" + long_code),
            _code(
                "print()",
                [
                    {
                        "output_type": "stream",
                        "name": "stdout",
                        "text": "fine\n" + "y" * 101 + "\n",
                    }
                ],
            ),
            _code(
                long_code,
                [
                    {
                        "output_type": "display_data",
                        "data": {"text/html": "<p/>", "text/plain": "z" * 300},
                    }
                ],
                tags=["remove-input"],
            ),
            _code(
                "x",
                [{"output_type": "stream", "name": "stdout", "text": "w" * 120}],
                tags=["remove-output"],
            ),
        ],
    )
    assert check_notebooks.long_lines(nb) == [(2, 2, 101)]
    assert check_notebooks.main([str(nb)]) == 1
    out = capsys.readouterr().out
    assert "bad.ipynb: cell 2, output line 2: 101 characters (limit 100)" in out
    assert check_notebooks.main(["-q", str(nb)]) == 1   # as ./ci/test runs it
    assert "bad.ipynb: cell 2, output line 2" in capsys.readouterr().out

    good = _notebook(
        tmp_path / "good.ipynb",
        [
            _code(
                long_code,
                [
                    {
                        "output_type": "error",
                        "ename": "E",
                        "evalue": "",
                        "traceback": ["\x1b[0;31m" + "e" * 100 + "\x1b[0m"],
                    }
                ],
            )
        ],
    )
    assert check_notebooks.main([str(good)]) == 0


def test_ruff_sets_the_code_line_limit():
    """Code lines: ruff (E501 at 88, the one setting), pinned in requirements.txt."""
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff["line-length"] == 88 == browser_test.COLUMNS["code"]
    assert {"E", "F", "W", "I"} <= set(ruff["lint"]["select"])
    assert "ruff==" in (ROOT / "requirements.txt").read_text()
    assert browser_test.COLUMNS["output"] == check_notebooks.OUTPUT_LIMIT == 100
