# memoryd: `make run` installs and runs the daemon; `make test` installs and runs every check.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

.PHONY: run test test-slow test-all lint typecheck bench clean install install-dev

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned to the CPU build that lies on these machines, so nothing
# later resolves torch to a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(PIP) install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/memoryd run

lint: install-dev
	$(BIN)/ruff check src tests bench

typecheck: install-dev
	$(BIN)/mypy

# The default run skips tests marked slow (real model loads, crash loops,
# crowded indexes); CI runs them too, after this.
test: lint typecheck
	$(BIN)/pytest -q -m "not slow"

test-slow: install-dev
	$(BIN)/pytest -q -m slow

test-all: lint typecheck
	$(BIN)/pytest -q

bench: install-dev
	$(BIN)/python bench/write.py
	$(BIN)/python bench/embed.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
