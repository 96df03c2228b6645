"""Two fixes to the HTML pages of the book, loaded from _config.yml (sphinx.local_extensions).

1. Inline scripts added twice. Sphinx 7.4 keeps an inline script that an extension adds
   after the builder started (``app.add_js_file(None, body=...)``, as sphinx-thebe does
   for its ``const THEBE_JS_URL = ...``) once under the file name ``None`` and once under
   ``''``, so every page declared the constant twice and the browser console reported
   "Identifier 'THEBE_JS_URL' has already been declared". Identical scripts are dropped
   here, whatever the spelling of their empty file name.
2. MathJax on every page. A chapter title with math (e.g. "... the limit $\\gamma \\to \\infty$")
   appears in the sidebar of every page, but Sphinx loads MathJax only on pages whose own
   content has math, so elsewhere the sidebar showed raw ``\\(\\gamma \\to \\infty\\)``. MathJax is
   served with the book (_config.yml, mathjax_path), so loading it everywhere costs no CDN.
"""

from __future__ import annotations


def _key(script) -> tuple:
    filename = getattr(script, "filename", script) or ""
    attributes = getattr(script, "attributes", {}) or {}
    return (str(filename), getattr(script, "priority", None), tuple(sorted(attributes.items())))


def drop_duplicate_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = _key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    # the builder restores its own list after each page, so editing in place is safe
    scripts[:] = unique


def setup(app):
    app.set_html_assets_policy("always")
    # after the extensions that add page-specific scripts in html-page-context
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
