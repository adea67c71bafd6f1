# Every target creates .venv when it is missing, so a fresh clone needs one command.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test check bench install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

## The main job on the embedded SQLite default.
run: $(STAMP)
	$(BIN)/python -m examples.main_job

## Install everything, start the local services the tests need, run the whole suite.
test: $(STAMP)
	bash scripts/system-deps.sh
	bash scripts/services.sh
	$(BIN)/python -m pytest -q
	# Again on PostgreSQL: the store contract, the engine's tests, and the graph server's store,
	# identity and whole acceptance suite (real server and worker processes, the console in Chromium).
	PYWORKFLOW_TEST_STORE=postgresql $(BIN)/python -m pytest -q tests/contract tests/unit \
		tests/acceptance/atfgraph --ignore=tests/unit/contrib

check: $(STAMP)
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.hitl

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
