# kmtrf: build the book and run the tests. See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
.DEFAULT_GOAL := book

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.stamp
BIN    := $(CURDIR)/$(VENV)/bin

# Run profile of the chapters: quick | book | paper (see kmtrf_core.profiles).
# `make book KMTRF_PROFILE=quick` overrides it.
KMTRF_PROFILE ?= book
export KMTRF_PROFILE
# Headless matplotlib for plain Python (unit tests). Notebook kernels get the inline
# backend instead: a kernel inherits MPLBACKEND, and under Agg plt.show() draws nothing
# into the executed notebook, so the HTML book would lose its figures.
export MPLBACKEND := Agg
KERNEL_ENV := MPLBACKEND=module://matplotlib_inline.backend_inline
# The venv first on PATH, so notebook kernels started by jupyter-book and nbmake
# run the venv's python (where kmtrf_core is installed).
export PATH := $(BIN):$(PATH)

BUILD      := _build
CACHE      := $(BUILD)/.jupyter_cache
CORE_HASH  := $(BUILD)/.core-hash

.PHONY: venv book test clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install -e . --no-deps
	@# from outside the repository, as a notebook kernel in book/ would import it
	cd / && $(BIN)/python -c "import kmtrf_core"
	touch $@

# The execution cache keys on notebook code cells only; a change to kmtrf_core,
# to _config.yml or to the profile must re-execute every chapter, so drop the cache then.
book: $(STAMP)
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

# Unit tests, then every chapter executed by nbmake, all at the quick profile.
test: $(STAMP)
	KMTRF_PROFILE=quick $(BIN)/python -m pytest tests
	KMTRF_PROFILE=quick $(KERNEL_ENV) $(BIN)/python -m pytest --nbmake --nbmake-timeout=900 book/

clean:
	rm -rf $(BUILD)
