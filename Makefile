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

## Install everything, start the local services the tests need, run the whole suite.
test: $(STAMP)
	bash scripts/system-deps.sh
	bash scripts/services.sh
	$(BIN)/python -m pytest -q --durations=15
	# Again on PostgreSQL: the store contract, the engine's tests, and the graph server's store,
	# identity and whole acceptance suite (real server and worker processes, the console in Chromium),
	# and the reliability suite's tests that follow the backend setting (races, the stateful test,
	# hostile input) but its race across two servers, which always uses PostgreSQL. (Its
	# crash-restart, lease and soak campaigns, and the database faults, run every backend they
	# need in the first pass; the benchmarks' smoke test runs on SQLite whatever the setting.)
	PYWORKFLOW_TEST_STORE=postgresql $(BIN)/python -m pytest -q --durations=15 tests/contract tests/unit \
		tests/acceptance/atfgraph --ignore=tests/unit/contrib --ignore=tests/unit/test_bench_smoke.py \
		tests/reliability/test_races.py tests/reliability/test_state_machine.py \
		tests/reliability/test_hostile_corpus.py \
		--deselect tests/reliability/test_races.py::test_races_across_two_servers_sharing_postgresql

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
