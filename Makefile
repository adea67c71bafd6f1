# Every target creates .venv when it is missing, so a fresh clone needs one command.
# Two installs: `make run` needs only the runtime (the server extra); `make test`, `make check`
# and `make bench` add every extra and the test and type-checking tools.
PY ?= python3
# make run PORT=7900 when 7878 is taken
PORT ?= 7878
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run test check bench reliability soak install install-run clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The full install also satisfies the runtime one, so `make run` after `make test` installs nothing.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; exit 0; fi; \
	echo "make run: installing the runtime into $(VENV) (pyworkflow, the graph server, its CLI)"; \
	$(BIN)/python -m pip install --quiet --upgrade pip && \
	$(BIN)/python -m pip install --progress-bar on -e '.[server]' && touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing everything into $(VENV): all extras and the test and type-checking tools"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -e '.[all,dev]'
	touch $(STAMP) $(RUN_STAMP)

install-run: $(RUN_STAMP)

install: $(STAMP)

## The main job on the embedded SQLite default; Ctrl-C or SIGTERM stops its server and worker.
run: $(RUN_STAMP)
	$(BIN)/python -m examples.main_job --port $(PORT)

## Install everything, start the local services the tests need, run the whole suite: once on
## SQLite and, at the same time, again on PostgreSQL (scripts/test-suite.sh says what each pass
## runs; one pass alone: scripts/test-suite.sh sqlite, or postgresql).
test: $(STAMP)
	bash scripts/system-deps.sh
	bash scripts/services.sh
	bash scripts/test-suite.sh

## The reliability suite's crash-restart campaigns at full size (2,000 trials per backend) and
## their figures; another size: make reliability RELIABILITY_ARGS="--trials 100" (or "--scale 3").
RELIABILITY_ARGS ?= --full
reliability: $(STAMP)
	bash scripts/services.sh
	$(BIN)/python -m tests.reliability $(RELIABILITY_ARGS)

## The soak: 10,000 parked runs, decisions, timers and a worker killed every minute, 10 minutes;
## less: make soak SOAK_ARGS="--minutes 3 --runs 2000".
SOAK_ARGS ?= --minutes 10 --runs 10000
soak: $(STAMP)
	bash scripts/services.sh
	$(BIN)/python -m tests.reliability.soak $(SOAK_ARGS)

check: $(STAMP)
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.hitl

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
