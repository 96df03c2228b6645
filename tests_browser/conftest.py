"""Fixtures of the browser tests (helpers in book_browser.py).

Options: ``--book DIR``, the book whose ``DIR/_build/html`` is tested (default
``_build_test/src``, what ``make test`` builds), and ``--screenshots DIR``, where one PNG
per page goes (default ``DIR/_build/screenshots``). Each page is loaded once (``book_page``);
the tests read what that load recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from book_browser import CHROMEDRIVER, CHROMIUM, REPO, Book, PageLoad, load_book, load_page, page_url, serve, start_chromium


def pytest_addoption(parser):
    group = parser.getgroup("kmtrf browser tests")
    group.addoption("--book", default=str(REPO / "_build_test" / "src"),
                    help="book root whose _build/html is tested (default: make test's staged copy)")
    group.addoption("--screenshots", default=None,
                    help="folder for one screenshot per page (default: BOOK/_build/screenshots)")


def _book_root(config) -> Path:
    root = Path(config.getoption("--book")).resolve()
    if not (root / "_toc.yml").is_file():
        pytest.exit(f"{root}/_toc.yml not found: --book names the book whose _build/html is tested "
                    "(make test stages and builds _build_test/src)", returncode=4)
    return root


def pytest_generate_tests(metafunc):
    """Parametrize ``docname`` over every page of the table of contents."""
    if "docname" in metafunc.fixturenames:
        metafunc.parametrize("docname", load_book(_book_root(metafunc.config)).docnames)


@pytest.fixture(scope="session")
def book(pytestconfig) -> Book:
    b = load_book(_book_root(pytestconfig))
    if not (b.html / "index.html").exists():
        pytest.exit(f"{b.html}/index.html not found: build the book first (make test)", returncode=2)
    return b


@pytest.fixture(scope="session")
def screenshots(pytestconfig, book) -> Path:
    folder = pytestconfig.getoption("--screenshots")
    path = Path(folder) if folder else book.html.parent / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def base_url(book):
    with serve(book.html) as url:
        yield url


@pytest.fixture(scope="session")
def driver():
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.exit(f"{path} not found: `make chromium` installs Debian's chromium and chromium-driver",
                        returncode=2)
    drv = start_chromium()
    yield drv
    drv.quit()


@pytest.fixture(scope="session")
def _page_cache() -> dict:
    return {}


@pytest.fixture
def book_page(docname, book, base_url, driver, screenshots, _page_cache) -> PageLoad:
    """The page of ``docname``, loaded once per session, with its screenshot saved."""
    if docname not in _page_cache:
        shot = screenshots / book.screenshot_name(docname)
        _page_cache[docname] = load_page(driver, page_url(base_url, docname), docname, shot)
    return _page_cache[docname]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    root = _book_root(config)
    folder = config.getoption("--screenshots") or root / "_build" / "screenshots"
    terminalreporter.write_line(f"browser tests of {root}/_build/html; screenshots in {folder}")
