#!/usr/bin/env bash
# The suite's two passes, as `make test` runs them:
#
#   scripts/test-suite.sh             both at once (the PostgreSQL pass's output follows the other's)
#   scripts/test-suite.sh sqlite      the whole suite on the embedded SQLite default
#   scripts/test-suite.sh postgresql  again on PostgreSQL: the store contract, the engine's tests,
#                                     the graph server's store, identity and acceptance suite (real
#                                     server and worker processes, the console in Chromium) and the
#                                     reliability tests that follow the backend setting
#
# The second pass runs the reliability suite's races, stateful test and hostile input but not its
# race across two servers, which always uses PostgreSQL; its crash-restart, lease and soak
# campaigns and the database faults run every backend they need in the first pass, and the
# benchmarks' smoke test runs on SQLite whatever the setting. Most of both passes waits on
# processes, databases and the browser rather than computing, so on two cores the two at once
# take about as long as the first alone (15 to 24 minutes, against 27 to 30 one after the other).
# Needs .venv (make install) and the services (scripts/services.sh). Exit status: 0 when every
# pass run passed.
set -u
cd "$(dirname "$0")/.."
PY=.venv/bin/python
# pytest, taking Ctrl-C as a KeyboardInterrupt even when started in the background (bash starts
# background commands with SIGINT ignored, and Python then keeps it ignored): an interrupted
# pass still runs its fixtures' teardown, which drops the databases and stops the processes its
# tests started.
PYTEST=("$PY" -c 'import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv[0] = "pytest"
runpy.run_module("pytest", run_name="__main__", alter_sys=True)')
SQLITE_ARGS=(-q --durations=15)
POSTGRESQL_ARGS=(-q --durations=15
  tests/contract tests/unit tests/acceptance/atfgraph tests/integration/test_runtime_stop.py tests/integration/test_cancelled_callers.py
  --ignore=tests/unit/contrib --ignore=tests/unit/test_bench_smoke.py
  tests/reliability/test_races.py tests/reliability/test_state_machine.py
  tests/reliability/test_hostile_corpus.py
  --deselect tests/reliability/test_races.py::test_races_across_two_servers_sharing_postgresql)

case "${1:-both}" in
  sqlite) exec "${PYTEST[@]}" "${SQLITE_ARGS[@]}" ;;
  postgresql) PYWORKFLOW_TEST_STORE=postgresql exec "${PYTEST[@]}" "${POSTGRESQL_ARGS[@]}" ;;
  both) ;;
  *) echo "usage: $0 [sqlite|postgresql]" >&2; exit 2 ;;
esac

# Both at once, each in the background so that this script stays free to pass on a stop: the
# PostgreSQL pass's output kept in a file and shown after the SQLite pass's, with its own
# temporary directory and no cache of its own (the two would write the same .pytest_cache).
work=$(mktemp -d "${TMPDIR:-/tmp}/pyworkflow-tests.XXXXXX")
log="$work/postgresql.log"
PYWORKFLOW_TEST_STORE=postgresql "${PYTEST[@]}" "${POSTGRESQL_ARGS[@]}" -p no:cacheprovider \
  --basetemp="$work/tmp" >"$log" 2>&1 &
pg=$!
"${PYTEST[@]}" "${SQLITE_ARGS[@]}" &
sq=$!
stopped() {  # both passes end as interrupted, each after its teardown
  wait "$sq" "$pg" 2>/dev/null
  rm -rf "$work"
  exit "$1"
}
# Ctrl-C reaches both passes itself (they share the terminal's process group); a stop of this
# script alone (TERM, HUP) is passed on to them as an interrupt.
trap 'stopped 130' INT
trap 'kill -INT "$sq" "$pg" 2>/dev/null; stopped 143' TERM HUP
echo "== the suite on SQLite; the PostgreSQL pass runs at the same time (its output follows)"
wait "$sq"
sqlite_status=$?
echo
echo "== the PostgreSQL pass (waiting for it to finish if it has not)"
wait "$pg"
pg_status=$?
trap - INT TERM HUP
cat "$log"
if [ "$sqlite_status" -eq 0 ] && [ "$pg_status" -eq 0 ]; then
  rm -rf "$work"
  echo "== both passes passed"
  exit 0
fi
rm -rf "$work/tmp"
echo "== failed: the SQLite pass exited $sqlite_status, the PostgreSQL pass $pg_status (its log: $log)"
exit 1
