# kmtrf: build the book and run the tests. See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
.DEFAULT_GOAL := book

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.stamp
BIN    := $(CURDIR)/$(VENV)/bin

# Run profile of the chapters: quick | book | paper (see kmtrf_core.book.profiles).
# `make book KMTRF_PROFILE=quick` overrides it.
KMTRF_PROFILE ?= book
export KMTRF_PROFILE
# The run cache of trained layers (kmtrf_core.training.runs), kept with the build:
# `make clean` empties it. A shared folder for a Dask cluster: `make models KMTRF_CACHE=/shared/runs`.
KMTRF_CACHE ?= $(CURDIR)/_build/runs
export KMTRF_CACHE
# `make models KMTRF_SCHEDULER=tcp://host:8786` trains the catalog on an existing Dask cluster.
WORKERS ?=
# Headless matplotlib for plain Python (unit tests). Notebook kernels get the inline
# backend instead: a kernel inherits MPLBACKEND, and under Agg plt.show() draws nothing
# into the executed notebook, so the HTML book would lose its figures.
export MPLBACKEND := Agg
KERNEL_ENV := MPLBACKEND=module://matplotlib_inline.backend_inline
# Slider cells draw one static figure in the builds (kmtrf_core.book.plotting.interactive): a built
# page cannot move a slider, and a headless widget cell can hang the notebook client.
export KMTRF_STATIC_WIDGETS := 1
# The venv first on PATH, so notebook kernels started by jupyter-book and nbmake
# run the venv's python (where kmtrf_core is installed).
export PATH := $(BIN):$(PATH)

BUILD      := _build
CACHE      := $(BUILD)/.jupyter_cache
CORE_HASH  := $(BUILD)/.core-hash

# MathJax served with the book, not from a CDN (see _config.yml: html_static_path, mathjax_path).
MATHJAX    := _mathjax/mathjax/tex-svg-full.js

# make test builds the book at the quick profile in a staged copy (tests_browser/stage_book.py),
# outside _build/: nbmake skips every notebook with a folder named _build in its path.
QUICK      := _build_test
QUICK_SRC  := $(QUICK)/src
# The browser tests open BROWSER_BOOK/_build/html; `make browser-test BROWSER_BOOK=.` checks
# the book that `make book` built (screenshots in _build/screenshots).
BROWSER_BOOK ?= $(QUICK_SRC)
SCREENSHOTS  ?= $(if $(filter $(QUICK_SRC),$(BROWSER_BOOK)),$(QUICK)/screenshots,$(BROWSER_BOOK)/_build/screenshots)
CHROMIUM     := /usr/bin/chromium
CHROMEDRIVER := /usr/bin/chromedriver

.PHONY: venv mathjax chromium models book test fuzz browser-test clean

venv: $(STAMP)

# requirements.txt pins numpy, scipy, pandas, matplotlib and scikit-learn releases that need
# Python 3.11 or newer: refuse an older $(PYTHON) in one line instead of a pip failure.
$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(None if v >= (3, 11) else \
	  f"$(PYTHON) is Python {v[0]}.{v[1]}; kmtrf needs 3.11 or newer: e.g. make PYTHON=python3.12")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install -e . --no-deps
	@# from outside the repository, as a notebook kernel in book/ would import it
	cd / && $(BIN)/python -c "import kmtrf_core"
	touch $@

# es5/tex-svg-full.js (every TeX extension built in, SVG output: it loads no other file)
# from the pinned django-static-mathjax wheel, with MathJax's licence.
mathjax: $(MATHJAX)

$(MATHJAX): $(STAMP)
	mkdir -p $(@D)
	src=$$($(BIN)/python -c 'import mathjax, pathlib; print(pathlib.Path(mathjax.__path__[0], "static", "mathjax"))'); \
	cp "$$src/LICENSE" $(@D)/LICENSE; \
	cp "$$src/es5/tex-svg-full.js" $@.tmp && mv $@.tmp $@

# Debian's chromium and its matching chromedriver, for the browser tests; installed only
# when missing (needs root or sudo, and apt access).
chromium:
	@if [ ! -x $(CHROMIUM) ] || [ ! -x $(CHROMEDRIVER) ]; then \
	  echo "Installing chromium and chromium-driver (apt) for the browser tests"; \
	  sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$sudo apt-get update -q; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	    chromium chromium-driver fonts-liberation; \
	fi

# Every training run of the book's catalog (kmtrf_core.book.catalog) that the run cache lacks,
# in parallel: a Dask LocalCluster with one single-threaded worker per core, or the cluster at
# $$KMTRF_SCHEDULER. Chapters then only load their layers.
models: $(STAMP)
	$(BIN)/python -m kmtrf_core.book.catalog --profile $(KMTRF_PROFILE) $(if $(WORKERS),--workers $(WORKERS))

# The execution cache keys on notebook code cells only; a change to kmtrf_core,
# to _config.yml or to the profile must re-execute every chapter, so drop the cache then.
book: $(STAMP) $(MATHJAX) models
	mkdir -p $(BUILD)
	new=$$( { find kmtrf_core -name '*.py' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum; \
	          sha256sum _config.yml; echo "KMTRF_PROFILE=$(KMTRF_PROFILE)"; } | sha256sum | cut -d' ' -f1 ); \
	old=$$(cat $(CORE_HASH) 2>/dev/null || true); \
	if [ "$$new" != "$$old" ]; then \
	  echo "kmtrf_core, _config.yml or KMTRF_PROFILE changed: clearing the execution cache"; \
	  rm -rf $(CACHE); \
	  echo "$$new" > $(CORE_HASH); \
	fi
	@echo "Building the book at KMTRF_PROFILE=$(KMTRF_PROFILE)"
	@# --all: re-read every page each time (Sphinx's saved environment would skip
	@# unchanged pages, so a failing cell or broken reference would not fail a rerun);
	@# unchanged chapters still come from the execution cache, so this costs seconds.
	$(KERNEL_ENV) $(BIN)/jupyter-book build . --all -W --keep-going
	@echo "Open $(BUILD)/html/index.html"

# make test, in order (each chapter is executed once):
#  1. the unit tests;
#  2. a copy of the book's sources in $(QUICK_SRC), with notebook execution off in its
#     _config.yml (book/ itself stays output-free);
#  3. nbmake executes every chapter of the copy at the quick profile and writes the
#     outputs into the copy's notebooks (--overwrite);
#  4. jupyter-book renders the copy from those outputs; any warning fails (-W);
#  5. the browser tests (tests_browser/) open every page in headless Chromium without
#     network: console errors, typeset math, images, Colab links, navigation; screenshots
#     go to $(SCREENSHOTS).
test: export KMTRF_CACHE := $(CURDIR)/$(QUICK)/runs
test: $(STAMP) $(MATHJAX) chromium
	KMTRF_PROFILE=quick $(BIN)/python -m pytest tests
	rm -rf $(QUICK)
	$(BIN)/python tests_browser/stage_book.py $(QUICK_SRC)
	KMTRF_PROFILE=quick $(KERNEL_ENV) $(BIN)/python -m pytest --nbmake --nbmake-timeout=900 --overwrite $(QUICK_SRC)/book
	$(BIN)/jupyter-book build $(QUICK_SRC) --all -W --keep-going
	$(MAKE) --no-print-directory browser-test BROWSER_BOOK=$(QUICK_SRC)

# The public API's contract (tests/test_contract.py) with many more examples per function than
# make test runs; prints the outcome counts. `make fuzz FUZZ_EXAMPLES=2000` for more.
FUZZ_EXAMPLES ?= 400
fuzz: $(STAMP)
	KMTRF_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/test_contract.py -q -s -p no:cacheprovider

# The browser tests alone, on an already built book (default: the one `make test` built).
browser-test: $(STAMP) chromium
	$(BIN)/python -m pytest tests_browser --book $(BROWSER_BOOK) --screenshots $(SCREENSHOTS)

clean:
	rm -rf $(BUILD) $(QUICK) _mathjax
