# memoryd: `make run` installs and runs the daemon; `make test` installs and runs the checks (lint, types, the fast tests on SQLite; `make test-postgres` and `make test-slow` run the rest).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

.PHONY: run test test-postgres test-slow test-all lint typecheck bench clean install install-dev

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python is built from source. llama.cpp's native CPU detection
# (GGML_NATIVE) compiles in every instruction set of the build machine,
# including the AMX kernels that crash (SIGSEGV in ggml_backend_amx_mul_mat) on
# Sapphire Rapids and later. We build a portable wheel (AVX2/FMA/F16C, no
# native detection) into our own wheelhouse, keyed on the version and the
# flags, and install that file. pip's wheel cache is bypassed on purpose: it
# does not key on CMAKE_ARGS, so a native wheel built once on this machine
# would otherwise be reused silently.
LLAMA_VERSION := 0.3.36
# hnswlib (the ANN graphs beside a SQLite store) compiles with -march=native unless
# HNSWLIB_NO_NATIVE is set: the same trap. It is built here with AVX2/FMA named
# explicitly (its distance kernels pick AVX from the compiler's flags), no wheel cache.
ifeq ($(shell uname -m),x86_64)
HNSWLIB_CFLAGS := -mavx2 -mfma -mf16c
else
HNSWLIB_CFLAGS :=
endif

ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE   := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=ON
else
LLAMA_CMAKE   := -DGGML_NATIVE=OFF
endif
LLAMA_KEY     := $(shell printf '%s %s' '$(LLAMA_VERSION)' '$(LLAMA_CMAKE)' | sha256sum | cut -c1-12)
WHEELHOUSE    ?= $(HOME)/.cache/memoryd/wheels/llama-$(LLAMA_VERSION)-$(LLAMA_KEY)

$(WHEELHOUSE)/.built: | $(BIN)/python
	@echo "building llama-cpp-python $(LLAMA_VERSION) portably (5-15 min the first time; reused after)"
	rm -rf $(WHEELHOUSE).tmp && mkdir -p $(WHEELHOUSE).tmp
	CMAKE_ARGS="$(LLAMA_CMAKE)" FORCE_CMAKE=1 $(PIP) wheel --quiet --no-cache-dir --no-deps \
		--no-binary llama-cpp-python -w $(WHEELHOUSE).tmp llama-cpp-python==$(LLAMA_VERSION)
	printf '%s\n' '$(LLAMA_CMAKE)' > $(WHEELHOUSE).tmp/CMAKE_ARGS
	rm -rf $(WHEELHOUSE) && mv $(WHEELHOUSE).tmp $(WHEELHOUSE)
	touch $@

# torch first, pinned to the CPU build that lies on these machines, so nothing
# later resolves torch to a multi-GB CUDA build; then the portable llama wheel
# by its file, so `pip install -e .` finds llama-cpp-python satisfied.
$(VENV)/.installed: pyproject.toml $(WHEELHOUSE)/.built | $(BIN)/python
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet --no-deps --force-reinstall $(WHEELHOUSE)/llama_cpp_python-*.whl
	HNSWLIB_NO_NATIVE=1 CFLAGS="$(HNSWLIB_CFLAGS)" $(PIP) install --quiet --no-cache-dir --no-deps \
		--no-binary hnswlib "hnswlib==0.8.0"
	$(PIP) install --quiet -e .
	$(BIN)/python -m memoryd.models.buildcheck
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
# crowded indexes) and the PostgreSQL half of the suite (every daemon test
# again on an embedded PostgreSQL); CI runs both too, after this.
test: lint typecheck
	$(BIN)/pytest -q -m "not slow and not postgres"

test-postgres: install-dev
	$(BIN)/pytest -q -m "postgres and not slow"

# Every slow test, on both backends.
test-slow: install-dev
	$(BIN)/pytest -q -m slow

test-all: lint typecheck
	$(BIN)/pytest -q

bench: install-dev
	$(BIN)/python bench/write.py
	$(BIN)/python bench/embed.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
