"""Three fixes to the HTML pages, made while Sphinx builds them.

1. Inline scripts appear once.  With Sphinx 7.4, an inline script that an
   extension adds after the builder starts is written twice: once from the
   builder and once from the registry (filename ``None`` versus ``""``).
   sphinx-thebe's ``const THEBE_JS_URL = ...`` then raises a SyntaxError in
   the browser on every page.
2. Links in ``html.extra_footer`` are relative to the site root.  The footer
   is the same HTML on every page, so a link such as ``book/record.html``
   would only work from pages in one folder; here it is rewritten for each
   page, so it also works from ``search.html`` and ``genindex.html``.
3. Printed text stays in order.  myst-nb's ``nb_merge_streams`` moves all of a
   cell's printed text into its first stream output, above any figure or HTML
   output printed between (chapter 1 printed four titles, then four grids).
   Without it, text printed in several flushes shows as several blocks.  This
   extension makes ``nb_merge_streams`` merge only neighbouring stream outputs
   of the same name, so each title stays above its grid and each block is one.
"""
import copy
import re

from sphinx.errors import ExtensionError

_BACKSPACE = re.compile(r"[^\n]\x08")  # a character erased by a backspace
_CARRIAGE_RETURN = re.compile(r".*\r(?=[^\n])")
_HREF = re.compile(r"""href=(["'])(?![a-z][a-z0-9+.-]*:|/|#)([^"']+)\1""")


def dedupe_inline_scripts(context: dict) -> None:
    files = context.get("script_files")
    if not files:
        return
    seen, kept = set(), []
    for js in files:
        if not getattr(js, "filename", "x"):  # an inline script, None or ""
            key = tuple(sorted(js.attributes.items()))
            if key in seen:
                continue
            seen.add(key)
        kept.append(js)
    context["script_files"] = kept


def footer_links_from_root(context: dict) -> None:
    footer = context.get("theme_extra_footer")
    pathto = context.get("pathto")
    if not footer or pathto is None:
        return

    def fix(m: re.Match) -> str:
        quote, target = m.group(1), m.group(2)
        return f"href={quote}{pathto(target, 1)}{quote}"

    context["theme_extra_footer"] = _HREF.sub(fix, footer)


def merge_neighbouring_streams(outputs: list) -> list:
    """Merge consecutive stream outputs of the same name; keep every other order.

    Returns new stream outputs and leaves the notebook's own outputs unchanged.
    """
    merged: list = []
    for out in outputs or []:
        prev = merged[-1] if merged else None
        if out["output_type"] != "stream":
            merged.append(out)
        elif (prev is not None and prev["output_type"] == "stream"
                and prev["name"] == out["name"]):
            prev["text"] += out["text"]
        else:
            merged.append(copy.copy(out))
    for out in merged:
        if out["output_type"] == "stream":
            text, erased = out["text"], 1
            while erased:
                text, erased = _BACKSPACE.subn("", text)
            out["text"] = _CARRIAGE_RETURN.sub("", text)
    return merged


def on_page(app, pagename, templatename, context, doctree):
    dedupe_inline_scripts(context)
    footer_links_from_root(context)


def setup(app):
    from shardbook.private import PrivateAPIError, replace_mystnb_stream_merge

    try:  # a private name of myst-nb 1.4.0, quarantined in shardbook/private.py
        replace_mystnb_stream_merge(merge_neighbouring_streams)
    except PrivateAPIError as e:
        raise ExtensionError(f"site_fixes: {e}") from e
    # After the theme and the extensions have filled the page context.
    app.connect("html-page-context", on_page, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
