"""Open every page of the built book in a real headless browser, and check its links.

  python ci/browser_test.py [SITE]      default SITE: _build/html

Two checks, both offline:

* Links (no browser): every local href/src in every HTML file points to a file that
  exists, and every #anchor to an id on that page.
* Browser (Playwright driving Debian's Chromium, /usr/bin/chromium or $CHROMIUM): the
  site is served on 127.0.0.1 only, and each page is opened at 1400 px.  It must log
  no console error, every request for a local asset must succeed, every <img> must be
  loaded (naturalWidth > 0), a notebook page must carry the Binder, Colab and Thebe
  launch buttons, and the page must show one search field and must not scroll
  sideways, at 1400 px nor at 400 px (a phone).  At 1400 px a code cell must show
  88 characters across and an output 100 (ruff's line-length in pyproject.toml, and
  the output limit of ci/check_notebooks.py).
  The search page must find "sharding".  With ``--screenshots``, or
  BOOK_SCREENSHOTS=1 in the environment (the GitHub workflow, which keeps them), a
  screenshot of each page at 1400 px goes to _build/screenshots/ (or
  ``--screenshots-dir DIR``): a picture for people, no check, and 40 % of the browser
  test's time, so ./ci/test alone takes none.

Requests to other hosts (MathJax, Thebe from a CDN) are blocked, so that a page is
tested as built, whatever a network serves that day; they are not counted as errors.
Exit status 1 if anything fails.
"""
from __future__ import annotations

import argparse
import functools
import html.parser
import http.server
import os
import shutil
import sys
import threading
import time
import tomllib
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import check_notebooks
import notebooks

ROOT = Path(__file__).resolve().parent.parent
WIDTH, HEIGHT = 1400, 900
NARROW = 400  # a phone: the page is also measured at this width, for sideways scroll
# The line limits (code: ruff's, output: ci/check_notebooks.py's): at WIDTH, lines
# this long must fit whole.
RUFF = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
COLUMNS = {"code": RUFF["line-length"], "output": check_notebooks.OUTPUT_LIMIT}
SEARCH_WORD = "sharding"
CHROMIUM_CANDIDATES = [
    "/usr/bin/chromium", "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome", "/usr/bin/google-chrome-stable",
]
SKIP_DIRS = {"_static", "_sources", "_images", "_downloads"}


# ---------------------------------------------------------------- link checker


class _Page(html.parser.HTMLParser):
    """Collect the ids of one HTML page and its local href/src targets."""

    LINK_ATTRS = {"href", "src"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[int, str, str]] = []  # (line, tag, url)

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            elif name in self.LINK_ATTRS:
                self.links.append((self.getpos()[0], tag, value))


def _is_local(url: str) -> bool:
    parts = urlsplit(url)
    return not parts.scheme and not parts.netloc and not url.startswith("//")


def html_pages(site: Path) -> list[Path]:
    """The site's pages: every .html file outside the theme's asset folders."""
    return sorted(
        p for p in site.rglob("*.html")
        if not SKIP_DIRS.intersection(p.relative_to(site).parts[:-1])
    )


def check_links(site: Path) -> list[str]:
    """Every local link target and #anchor in the site exists; returns the problems."""
    site = site.resolve()
    parsed: dict[Path, _Page] = {}

    def parse(path: Path) -> _Page:
        if path not in parsed:
            page = _Page()
            page.feed(path.read_text(encoding="utf-8", errors="replace"))
            parsed[path] = page
        return parsed[path]

    problems = []
    for path in html_pages(site):
        rel = path.relative_to(site)
        for line, tag, url in parse(path).links:
            if not _is_local(url) or url.startswith(("javascript:", "data:")):
                continue
            parts = urlsplit(url)
            target = path if not parts.path else (path.parent / unquote(parts.path))
            if parts.path.endswith("/") or target.is_dir():
                target = target / "index.html"
            target = target.resolve()
            if not target.is_relative_to(site):
                problems.append(f"{rel}:{line}: <{tag}> {url}: outside the site")
                continue
            if not target.is_file():
                problems.append(f"{rel}:{line}: <{tag}> {url}: no such file")
                continue
            frag = unquote(parts.fragment)
            if frag and target.suffix == ".html" and frag not in parse(target).ids:
                problems.append(f"{rel}:{line}: <{tag}> {url}: no anchor #{frag}")
    return problems


# ---------------------------------------------------------------- browser checks


def find_chromium() -> str | None:
    """The browser to drive: $CHROMIUM, else the first Debian/Ubuntu path present."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if Path(env).exists() else shutil.which(env)
    return next((c for c in CHROMIUM_CANDIDATES if Path(c).exists()), None)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextmanager
def serve(site: Path):
    """Serve SITE on 127.0.0.1 (loopback only) on a free port; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def missing_pages(site: Path, root: Path = ROOT) -> list[str]:
    """Every page of _toc.yml is built, and every notebook of it as a notebook page."""
    problems = []
    for source in notebooks.pages(root):
        page = site / source.relative_to(root).with_suffix(".html")
        if not page.is_file():
            problems.append(f"{page.relative_to(site)}: not built (it is in _toc.yml)")
        elif source.suffix == ".ipynb" and not is_notebook_page(site, page):
            problems.append(f"{page.relative_to(site)}: not built from its notebook")
    return problems


def is_notebook_page(site: Path, page: Path) -> bool:
    """A page made from a notebook: Sphinx keeps its source as _sources/<page>.ipynb."""
    rel = page.relative_to(site).with_suffix(".ipynb")
    return (site / "_sources" / rel).is_file()


# Run in the page: what a reader would see go wrong.
_PAGE_JS = """() => {
  const d = document.documentElement;
  const broken = [...document.images]
    .filter(i => !(i.complete && i.naturalWidth > 0))
    .map(i => i.getAttribute('src'));
  return {overflow: d.scrollWidth - d.clientWidth, broken: broken,
          binder: !!document.querySelector('a[href*="mybinder.org/v2/"]'),
          colab: !!document.querySelector('a[href*="colab.research.google.com"]'),
          thebe: !!document.querySelector('.btn-launch-thebe'),
          searchFields: [...document.querySelectorAll('.search-button-field')]
            .filter(e => e.offsetParent !== null).length};
}"""


# How many characters fit across a code cell and an output at this width.
_COLUMNS_JS = """() => {
  const cols = {};
  for (const [kind, sel] of [["code", "div.cell_input pre"],
                             ["output", "div.cell_output pre"]]) {
    const pre = document.querySelector(sel);
    if (!pre) continue;
    const s = getComputedStyle(pre), probe = document.createElement("span");
    probe.textContent = "x".repeat(100);
    probe.style.font = s.font;
    probe.style.whiteSpace = "pre";
    probe.style.position = "absolute";
    document.body.appendChild(probe);
    const w = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const inner = pre.clientWidth - parseFloat(s.paddingLeft)
                  - parseFloat(s.paddingRight);
    cols[kind] = Math.floor(inner / w);
  }
  return cols;
}"""
_OVERFLOW_JS = """() => document.documentElement.scrollWidth
  - document.documentElement.clientWidth"""


def check_pages(site: Path, shots: Path | None, chromium: str,
                search_word: str | None = SEARCH_WORD) -> list[str]:
    """Open every page in Chromium; returns the problems (empty when all is well)."""
    from playwright.sync_api import sync_playwright

    site = site.resolve()
    problems: list[str] = []
    if shots:
        shutil.rmtree(shots, ignore_errors=True)
        shots.mkdir(parents=True)
    with serve(site) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
        # No network in CI: requests to other hosts are blocked, not counted.
        context.route(
            lambda url: not url.startswith(base), lambda route: route.abort()
        )
        page = context.new_page()
        events: list[str] = []

        def on_console(msg):
            if msg.type != "error":
                return
            where = (msg.location or {}).get("url", "")
            if where and not where.startswith(base):
                return  # a blocked request to another host
            if msg.text.startswith("Failed to load resource") and not where:
                return  # reported below, with its URL, when it is local
            events.append(f"console error: {msg.text[:300]}")

        def on_failed(req):
            # ERR_ABORTED: still loading when the test moved on to the next page (a
            # font, a late script), never an answer; a missing file is an HTTP 404
            if req.url.startswith(base) and req.failure != "net::ERR_ABORTED":
                events.append(f"request failed: {req.url[len(base):]} ({req.failure})")

        def on_response(resp):
            if resp.url.startswith(base) and resp.status >= 400:
                events.append(f"HTTP {resp.status}: {resp.url[len(base):]}")

        page.on("console", on_console)
        page.on("pageerror", lambda err: events.append(f"page error: {err}"))
        page.on("requestfailed", on_failed)
        page.on("response", on_response)

        for path in html_pages(site):
            rel = path.relative_to(site).as_posix()
            t0 = time.perf_counter()
            events.clear()
            url = base + rel
            if rel == "search.html" and search_word:
                url += f"?q={search_word}"
            page.goto(url, wait_until="load")
            found = []
            if rel == "search.html" and search_word:
                try:
                    page.wait_for_selector("#search-results li", timeout=15_000)
                except Exception:
                    pass
                found = page.locator("#search-results li").all()
                if not found:
                    events.append(f"search for {search_word!r} found nothing")
            page.wait_for_timeout(100)  # let late console messages arrive
            info = page.evaluate(_PAGE_JS)
            if info["overflow"] > 1:
                px = info["overflow"]
                events.append(f"scrolls sideways by {px} px at {WIDTH} px")
            events.extend(f"image not loaded: {src}" for src in info["broken"])
            if info["searchFields"] > 1:
                events.append(f"{info['searchFields']} search fields shown, not one")
            for kind, cols in page.evaluate(_COLUMNS_JS).items():
                want = COLUMNS[kind]
                if cols < want:
                    events.append(f"a {kind} line of {want} characters does not fit "
                                  f"(only {cols} do at {WIDTH} px)")
            if is_notebook_page(site, path):
                for button in ("binder", "colab", "thebe"):
                    if not info[button]:
                        events.append(f"no {button} launch button")
            if shots:
                name = rel.replace("/", "__").removesuffix(".html") + ".jpg"
                page.screenshot(path=str(shots / name), full_page=True,
                                type="jpeg", quality=75)
            page.set_viewport_size({"width": NARROW, "height": HEIGHT})
            page.wait_for_timeout(50)
            px = page.evaluate(_OVERFLOW_JS)
            if px > 1:
                events.append(f"scrolls sideways by {px} px at {NARROW} px")
            page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
            problems.extend(f"{rel}: {e}" for e in events)
            note = f", {len(found)} search results" if found else ""
            status = "ok" if not events else f"{len(events)} problem(s)"
            print(f"[browser] {rel}: {status} ({time.perf_counter() - t0:.1f} s{note})")
        browser.close()
    return problems


# ---------------------------------------------------------------- self-test


PLANTED = {
    # A page whose figure is missing, a page wider than the window, one wider than
    # a phone, a page that declares a constant twice (as the doubled Thebe script
    # did), and a code cell too narrow for an 88-column line.
    "index.html": '<html><body><p>Planted bugs.</p><img src="figure.png" alt="gone">'
                  '<a href="wide.html">wide</a></body></html>',
    "wide.html": '<html><body><div style="width: 3000px">too wide</div></body></html>',
    "phone.html": '<html><body><div style="width: 800px">wide on a phone</div>'
                  '</body></html>',
    "script.html": '<html><head><script>const URL_ = 1;</script>'
                   '<script>const URL_ = 1;</script></head><body>x</body></html>',
    "narrow-code.html": '<html><body><div class="cell_input">'
                        '<pre style="width: 400px">x = 1</pre></div></body></html>',
}


def planted_site(where: Path) -> Path:
    """Write a tiny site with a missing image, a wide page and a script error."""
    where.mkdir(parents=True, exist_ok=True)
    for name, text in PLANTED.items():
        (where / name).write_text(text)
    return where


def self_test(chromium: str) -> list[str]:
    """Check that both checkers report the planted bugs; returns what they missed."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        site = planted_site(Path(tmp))
        found = check_links(site) + check_pages(site, None, chromium, search_word=None)
    wanted = {
        "missing image (link checker)": "index.html:1: <img> figure.png: no such file",
        "missing image (browser)": "index.html: image not loaded: figure.png",
        "page overflow (browser)": "wide.html: scrolls sideways by",
        "page overflow on a phone (browser)": "phone.html: scrolls sideways by",
        "script error (browser)": "script.html: page error:",
        "code column too narrow (browser)": "narrow-code.html: a code line of 88",
    }
    return [what for what, text in wanted.items()
            if not any(f.startswith(text) for f in found)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", nargs="?", type=Path, default=ROOT / "_build" / "html")
    ap.add_argument("--screenshots", action="store_true",
                    default=os.environ.get("BOOK_SCREENSHOTS") == "1",
                    help="keep a screenshot of every page (also BOOK_SCREENSHOTS=1)")
    ap.add_argument("--screenshots-dir", type=Path,
                    help="where they go (implies --screenshots; default "
                    "_build/screenshots)")
    ap.add_argument("--links-only", action="store_true", help="skip the browser")
    ap.add_argument("--self-test", action="store_true",
                    help="only check that planted bugs are caught")
    args = ap.parse_args(argv)
    if args.self_test:
        chromium = find_chromium()
        if not chromium:
            print("[browser] no Chromium found: run ci/browser, which installs it")
            return 2
        missed = self_test(chromium)
        for what in missed:
            print(f"  FAIL the checker missed a planted {what}")
        print(f"[browser] self-test {'FAILED' if missed else 'passed'}: "
              f"{len(PLANTED)} pages with planted bugs")
        return 1 if missed else 0
    if not (args.site / "index.html").is_file():
        print(f"[browser] no built site at {args.site}: run ./ci/build first")
        return 2
    t0 = time.perf_counter()
    problems = check_links(args.site)
    if args.site.resolve() == (ROOT / "_build" / "html").resolve():
        problems += missing_pages(args.site)   # the book itself: every page of _toc.yml
    n = len(html_pages(args.site))
    print(f"[links] {n} pages, {len(problems)} broken local link(s) "
          f"({time.perf_counter() - t0:.1f} s)")
    if not args.links_only:
        chromium = find_chromium()
        if not chromium:
            print("[browser] no Chromium found: run ci/browser, which installs it")
            return 2
        t1 = time.perf_counter()
        shots = args.screenshots_dir or (
            ROOT / "_build" / "screenshots" if args.screenshots else None)
        problems += check_pages(args.site, shots, chromium)
        where = (f"screenshots in {shots}" if shots
                 else "no screenshots (--screenshots or BOOK_SCREENSHOTS=1)")
        print(f"[browser] {n} pages in {time.perf_counter() - t1:.1f} s "
              f"with {chromium}; {where}")
    for p in problems:
        print(f"  FAIL {p}")
    return check_notebooks.verdict(
        "browser", len(problems),
        f"{len(problems)} problem(s) in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
