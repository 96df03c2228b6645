"""Helpers of the browser tests: the book's pages, a local server, headless Chromium.

The HTML is served from a ``http.server`` bound to 127.0.0.1, and Chromium gets no
network besides it: every host name resolves to nothing (``--host-resolver-rules``) and
every other request goes to a proxy that refuses connections (``--proxy-server`` on the
discard port 9; Chromium never proxies loopback addresses). A page that needs a CDN
therefore fails here, as it would for a reader offline.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from stage_book import toc_files

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("KMTRF_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("KMTRF_CHROMEDRIVER", "/usr/bin/chromedriver")
WINDOW = (1366, 900)  # wide enough for the theme to show the left sidebar
PAGE_TIMEOUT_S = 120
# Chromium's screenshots are limited by its texture size; longer pages are cut there.
MAX_SCREENSHOT_HEIGHT = 16000


# --- the book: its table of contents and configuration ----------------------------

def toc_docnames(node) -> list[str]:
    """Every ``root`` / ``file`` entry of a sphinx-external-toc tree, in order, without suffix."""
    # "book/intro.md" and "book/intro" name the same document
    return [re.sub(r"\.(md|ipynb|rst)$", "", n) for n in toc_files(node)]


@dataclass(frozen=True)
class Book:
    root: Path
    config: dict
    docnames: tuple[str, ...]  # root page first, then as in _toc.yml

    @property
    def html(self) -> Path:
        return self.root / "_build" / "html"

    @property
    def root_docname(self) -> str:
        return self.docnames[0]

    def source(self, docname: str) -> Path:
        found = [p for p in (self.root / f"{docname}{s}" for s in (".ipynb", ".md", ".rst")) if p.exists()]
        assert len(found) == 1, f"{docname}: expected one source file, found {found}"
        return found[0]

    def screenshot_name(self, docname: str) -> str:
        """``02_kmeans_lloyd.png`` for ``book/02_kmeans_lloyd``, unless two pages share a name."""
        names = [Path(d).name for d in self.docnames]
        name = Path(docname).name
        return f"{name if names.count(name) == 1 else docname.replace('/', '__')}.png"

    def colab_url(self, docname: str) -> str:
        """Where the page's Colab launch button must point."""
        repo = self.config["repository"]
        owner_repo = urlsplit(str(repo["url"])).path.strip("/").removesuffix(".git")
        path_to_book = str(repo.get("path_to_book") or "").strip("/")
        path = f"{path_to_book}/{docname}.ipynb" if path_to_book else f"{docname}.ipynb"
        colab = str(self.config["launch_buttons"]["colab_url"]).rstrip("/")
        return f"{colab}/github/{owner_repo}/blob/{repo['branch']}/{path}"


def load_book(root: Path) -> Book:
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    return Book(root=root, config=config, docnames=tuple(dict.fromkeys(toc_docnames(toc))))


# --- serving and browsing ---------------------------------------------------------

class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serve ``directory`` on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def chromium_options():
    from selenium.webdriver.chrome.options import Options

    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        # no network: names resolve to nothing, and whatever is not loopback goes to a
        # proxy on the discard port, where nothing listens
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
        "--proxy-server=127.0.0.1:9",
        "--proxy-bypass-list=127.0.0.1;localhost",
        # no background traffic of the browser itself
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
        "--disable-extensions",
        "--disable-features=Translate,OptimizationHints,MediaRouter",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return options


def start_chromium():
    """Headless Chromium driven by Debian's chromedriver, with the options above."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Selenium Manager must not try to download a browser or a driver
    os.environ.setdefault("SE_OFFLINE", "true")
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=chromium_options())
    drv.set_page_load_timeout(PAGE_TIMEOUT_S)
    drv.set_script_timeout(PAGE_TIMEOUT_S)
    return drv


def console_entries(drv) -> list[dict]:
    """The browser log since the last call (reading it empties it)."""
    return drv.get_log("browser")


# Waits until MathJax (if the page loads it) has typeset the page; resolves with a status.
# Called once the document is complete, when MathJax's deferred script has run or failed:
# a MathJax without ``startup`` then is only Sphinx's configuration, the script did not load.
_WAIT_FOR_MATHJAX = """
const done = arguments[arguments.length - 1];
const start = Date.now();
(function poll() {
  const mj = window.MathJax;
  if (mj && mj.startup && mj.startup.promise) {
    mj.startup.promise.then(() => done("typeset"), (e) => done("error: " + e));
  } else if (!document.querySelector('script[src*="mathjax" i]')) {
    done("no MathJax on this page");
  } else if (Date.now() - start > 5000) {
    done("the MathJax script did not load");
  } else {
    setTimeout(poll, 100);
  }
})();
"""

# Makes lazy images load and waits (up to 60 s) until every image has finished or failed.
_WAIT_FOR_IMAGES = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.images);
images.forEach((img) => { if (img.loading === "lazy") img.loading = "eager"; });
const start = Date.now();
(function poll() {
  if (images.every((img) => img.complete) || Date.now() - start > 60000) done(images.length);
  else setTimeout(poll, 100);
})();
"""

# Everything the tests check, read from the page after math and images are done.
_PAGE_FACTS = """
const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
const abs = (u) => { try { return new URL(u, document.baseURI).href; } catch (e) { return String(u); } };

// visible text outside code, scripts and typeset math
const skip = "pre, code, script, style, textarea, noscript, mjx-container, .highlight, .MathJax";
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
  acceptNode(node) {
    const el = node.parentElement;
    if (!el || el.closest(skip)) return NodeFilter.FILTER_REJECT;
    if (el.checkVisibility && !el.checkVisibility()) return NodeFilter.FILTER_REJECT;
    return NodeFilter.FILTER_ACCEPT;
  },
});
const prose = [];
for (let n = walker.nextNode(); n; n = walker.nextNode()) prose.push(n.nodeValue);

const mathNodes = Array.from(document.querySelectorAll(".math"));
const resources = [
  ...Array.from(document.querySelectorAll("script[src]"), (e) => e.src),
  ...Array.from(document.querySelectorAll('link[rel~="stylesheet"][href]'), (e) => e.href),
  ...Array.from(document.querySelectorAll("img[src], iframe[src], video[src], audio[src], source[src]"), (e) => e.src),
];
return {
  url: location.href,
  title: document.title,
  has_article: !!document.querySelector("article.bd-article"),
  h1: Array.from(article.querySelectorAll("h1"), (h) => h.innerText.trim()),
  body_text: document.body.innerText,
  prose_text: prose.join(" "),
  math_nodes: mathNodes.length,
  math_nodes_untypeset: mathNodes.filter((m) => !m.querySelector("mjx-container")).map((m) =>
    (article.contains(m) ? "" : m.closest(".bd-sidebar-primary") ? "[sidebar] " : "[outside the article] ")
    + m.textContent.slice(0, 120)),
  mjx_containers: document.querySelectorAll("mjx-container").length,
  mjx_errors: Array.from(document.querySelectorAll('mjx-container [data-mml-node="merror"]'),
                         (e) => (e.getAttribute("data-mjx-error") || e.textContent || "").slice(0, 200)),
  mjx_undefined: Array.from(document.querySelectorAll('mjx-container [data-mml-node="mtext"][fill="red"], mjx-container [data-mml-node="mtext"][color="red"]'),
                            (e) => (e.textContent || "").slice(0, 80)),
  mathjax_version: (window.MathJax && window.MathJax.version) || null,
  mathjax_scripts: Array.from(document.querySelectorAll("script[src]"), (e) => e.src).filter((s) => /mathjax/i.test(s)),
  images: Array.from(document.images, (img) => ({
    src: (img.currentSrc || img.src || "").slice(0, 200),
    complete: img.complete,
    natural_width: img.naturalWidth,
    in_article: article.contains(img),
  })),
  resources: resources.map(abs),
  links: Array.from(document.querySelectorAll("a[href]"), (a) => a.href),
  sidebar_links: Array.from(document.querySelectorAll(".bd-sidebar-primary nav.bd-docs-nav a[href]"), (a) => a.href),
  scroll_height: Math.max(document.documentElement.scrollHeight, document.body.scrollHeight),
};
"""


@dataclass
class PageLoad:
    docname: str
    url: str
    mathjax_status: str
    facts: dict
    console: list[dict] = field(default_factory=list)
    screenshot: Path | None = None

    @property
    def severe(self) -> list[str]:
        return [e["message"] for e in self.console if e.get("level") == "SEVERE"]


def page_url(base_url: str, docname: str) -> str:
    return f"{base_url}{docname}.html"


def save_screenshot(drv, path: Path, height: int) -> None:
    """The whole page (up to MAX_SCREENSHOT_HEIGHT px): the viewport is made as tall as the
    page for the shot (Page.captureScreenshot's captureBeyondViewport shifted some pages)."""
    width = drv.execute_script("return window.innerWidth") or WINDOW[0]
    height = max(1, min(int(height), MAX_SCREENSHOT_HEIGHT))
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    try:
        shot = drv.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    finally:
        drv.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    path.write_bytes(base64.b64decode(shot["data"]))


def load_page(drv, url: str, docname: str, screenshot: Path | None) -> PageLoad:
    from selenium.webdriver.support.ui import WebDriverWait

    console_entries(drv)  # drop what earlier pages logged
    drv.get(url)
    WebDriverWait(drv, PAGE_TIMEOUT_S).until(
        lambda d: d.execute_script("return document.readyState") == "complete")
    status = drv.execute_async_script(_WAIT_FOR_MATHJAX)
    drv.execute_async_script(_WAIT_FOR_IMAGES)
    facts = drv.execute_script(_PAGE_FACTS)
    if screenshot is not None:
        save_screenshot(drv, screenshot, facts["scroll_height"])
    console = console_entries(drv)
    return PageLoad(docname=docname, url=url, mathjax_status=status, facts=facts,
                    console=console, screenshot=screenshot)
