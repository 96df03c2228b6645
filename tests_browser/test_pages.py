"""Every page of the built book, opened in headless Chromium without network.

Per page of ``_toc.yml``: no console errors, nothing loaded from another origin, math
typeset by the local MathJax, every image loaded (and a figure on every chapter that
draws one), the Colab launch link pointing at that chapter's notebook. For the book:
``index.html`` leads to the root page, and the sidebar reaches every chapter.
Screenshots of every page are saved (see conftest.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit


from book_browser import console_entries, load_page, page_url

# Raw TeX that MathJax should have replaced: display/inline delimiters, environments,
# and $...$ spans that contain a TeX command.
RAW_MATH = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\n]{0,200}?\\[A-Za-z]+[^$\n]{0,200}?\$")
# A chapter whose code draws with matplotlib (directly or through kmtrf_core.book.plotting)
# must show at least one figure.
DRAWS = re.compile(r"\bmatplotlib\b|\bplt\.|\bplotting\b")
# Math in a page's own markdown (outside code): $...$, $$...$$, {math}, \begin{...}.
SOURCE_MATH = re.compile(r"\$[^$\n]+\$|\{math\}|\\begin\{")
CODE = re.compile(r"```.*?```|~~~.*?~~~|`[^`\n]*`", re.S)


def _cells(path: Path, kind: str) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c.get("source", "")) for c in nb["cells"] if c.get("cell_type") == kind]


def _markdown(path: Path) -> str:
    text = "\n".join(_cells(path, "markdown")) if path.suffix == ".ipynb" else path.read_text(encoding="utf-8")
    return CODE.sub(" ", text)


def _draws_figures(path: Path) -> bool:
    return path.suffix == ".ipynb" and any(DRAWS.search(src) for src in _cells(path, "code"))


def _local_docname(url: str, base_url: str) -> str | None:
    """``book/02_kmeans_lloyd`` for a link to that page on the local server, else None."""
    if not url.startswith(base_url):
        return None
    path = urlsplit(url).path[len(urlsplit(base_url).path):]
    return re.sub(r"\.html$", "", path) if path.endswith(".html") else None


# --- the whole book -----------------------------------------------------------------

def test_browser_has_no_network(driver, base_url):
    """The set-up itself: a CDN is unreachable, the local server is reachable."""
    driver.get(base_url + "index.html")
    result = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const probe = (url) => fetch(url, {mode: "no-cors", cache: "no-store"}).then(() => "reached", () => "failed");
        Promise.all([probe("https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-svg.js"),
                     probe("http://example.com/"), probe(location.href)]).then(done);
    """)
    console_entries(driver)  # the failed probes logged errors; drop them
    assert result == ["failed", "failed", "reached"], result


def test_index_leads_to_root_page(book, driver, base_url):
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(base_url + "index.html")
    WebDriverWait(driver, 30).until(lambda d: d.current_url == page_url(base_url, book.root_docname))
    console_entries(driver)


def test_sidebar_reaches_every_chapter(book, driver, base_url):
    root = load_page(driver, page_url(base_url, book.root_docname), book.root_docname, None)
    linked = {d for d in (_local_docname(u, base_url) for u in root.facts["sidebar_links"]) if d}
    chapters = set(book.docnames[1:])
    assert chapters <= linked, f"not in the sidebar of the root page: {sorted(chapters - linked)}"
    assert linked <= set(book.docnames), f"sidebar pages not in _toc.yml: {sorted(linked - set(book.docnames))}"

    broken = []
    for href in dict.fromkeys(root.facts["sidebar_links"]):
        if _local_docname(href, base_url) is None:
            continue
        driver.get(href)
        state = driver.execute_script("""
            const nav = performance.getEntriesByType("navigation")[0];
            return {status: nav ? nav.responseStatus : null,
                    article: !!document.querySelector("article.bd-article"),
                    title: document.title};
        """)
        if state["status"] not in (200, None) or not state["article"]:
            broken.append((href, state))
    console_entries(driver)
    assert not broken, f"sidebar links that do not load a page: {broken}"


# --- every page ---------------------------------------------------------------------

def test_no_console_errors(book_page):
    severe = book_page.severe
    assert not severe, f"{book_page.docname}: console errors:\n" + "\n".join(severe)


def test_nothing_loaded_from_elsewhere(book_page, base_url):
    """Scripts, styles and images come from the book itself (a CDN fails offline)."""
    outside = [u for u in book_page.facts["resources"]
               if u.startswith(("http:", "https:", "//")) and not u.startswith(base_url)]
    assert not outside, f"{book_page.docname}: resources from another origin: {outside}"


def test_math_is_typeset(book_page, book, base_url):
    facts, docname = book_page.facts, book_page.docname
    source_has_math = bool(SOURCE_MATH.search(_markdown(book.source(docname))))
    if source_has_math:
        assert facts["math_nodes"] > 0, f"{docname}: the source has math but the page has no math element"
    if facts["math_nodes"]:
        assert not facts["math_nodes_untypeset"], (
            f"{docname}: {len(facts['math_nodes_untypeset'])} of {facts['math_nodes']} math elements "
            f"not typeset (MathJax: {book_page.mathjax_status}), e.g. {facts['math_nodes_untypeset'][:3]}")
        assert book_page.mathjax_status == "typeset", f"{docname}: MathJax: {book_page.mathjax_status}"
        assert facts["mathjax_version"] == "3.2.2", f"{docname}: MathJax version {facts['mathjax_version']}"
        scripts = facts["mathjax_scripts"]
        assert len(scripts) == 1 and scripts[0].startswith(base_url), (
            f"{docname}: expected the book's own MathJax, loaded once; the page loads {scripts}")
    assert not facts["mjx_errors"], f"{docname}: TeX errors: {facts['mjx_errors'][:5]}"
    assert not facts["mjx_undefined"], f"{docname}: undefined TeX macros: {facts['mjx_undefined'][:5]}"
    raw = sorted({m.group(0)[:80] for m in RAW_MATH.finditer(facts["prose_text"])})
    assert not raw, f"{docname}: raw TeX in the visible text (outside code): {raw[:10]}"


def test_images_load(book_page, book):
    images, docname = book_page.facts["images"], book_page.docname
    broken = [img["src"] for img in images if not (img["complete"] and img["natural_width"] > 0)]
    assert not broken, f"{docname}: images that did not load: {broken}"
    if _draws_figures(book.source(docname)):
        in_article = [img for img in images if img["in_article"]]
        assert in_article, f"{docname}: the chapter draws figures, but the page shows no image"


def test_colab_link(book_page, book):
    docname = book_page.docname
    colab = str(book.config["launch_buttons"]["colab_url"]).rstrip("/")
    links = sorted({u for u in book_page.facts["links"] if u.startswith(colab)})
    if book.source(docname).suffix != ".ipynb":
        assert not links, f"{docname} is not a notebook but has Colab links {links}"
        return
    expected = book.colab_url(docname)
    assert links == [expected], f"{docname}: Colab links {links}, expected [{expected}]"
    # the link names the chapter's path in the repository
    repo_path = expected.split(f"/blob/{book.config['repository']['branch']}/", 1)[1]
    assert (book.root / repo_path).is_file(), f"{docname}: the Colab link names {repo_path}, not a file of the book"
