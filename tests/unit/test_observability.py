"""The pieces of metrics and logs on their own: the redaction every log line passes through, the
JSON and text records with their structured fields, the one logging set-up's refusals, the rule
that observes what an attempt continues from, and the state collector on a real SQLite store."""

from __future__ import annotations

import io
import json
import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyworkflow.store import SQLiteStore, log_format, log_level, metrics, open_store, redact, setup_logging

TOKEN = "atfg_0123456789abcdef_" + "S" * 32
HOOK_TOKEN = "pwh_" + "h" * 32


def test_redact_masks_every_credential_and_keeps_the_rest() -> None:
    line = (
        f"token {TOKEN} hook {HOOK_TOKEN} db postgresql://app:hunter2@db:5432/x "
        "header Authorization: Bearer opaque-secret-value run AP7lS"
    )
    out = redact(line)
    for secret in ("S" * 32, "h" * 32, "hunter2", "opaque-secret-value"):
        assert secret not in out
    # What names the credential stays: the token's public id, the user, the host, the run.
    assert "atfg_0123456789abcdef_***" in out and "pwh_***" in out
    assert "postgresql://app:***@db:5432/x" in out and "run AP7lS" in out
    assert redact("nothing secret here") == "nothing secret here"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


def test_json_records_carry_level_names_fields_and_no_secret(captured: io.StringIO) -> None:
    setup_logging("info", "json", stream=captured)
    log = logging.getLogger("pyworkflow.test")
    log.debug("not at info")
    log.info("run %s: running with %s", "R1", TOKEN, extra={"run_id": "R1", "wait_id": "W1", "attempt": 2})
    try:
        raise RuntimeError(f"failed with {TOKEN}")
    except RuntimeError:
        log.exception("turn crashed")
    records = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert [r["level"] for r in records] == ["INFO", "ERROR"]
    first = records[0]
    assert first["logger"] == "pyworkflow.test"
    assert (first["run_id"], first["wait_id"], first["attempt"]) == ("R1", "W1", 2)
    assert first["message"] == "run R1: running with atfg_0123456789abcdef_***"
    assert "RuntimeError" in records[1]["exception"]
    assert "S" * 32 not in captured.getvalue()


def test_text_records_put_fields_after_the_message(captured: io.StringIO) -> None:
    setup_logging("WARNING", "text", stream=captured)
    logging.getLogger("atfgraph.server").info("hidden")
    logging.getLogger("atfgraph.server").warning("lease lost", extra={"run_id": "R9", "attempt": 3})
    (line,) = captured.getvalue().splitlines()
    assert " WARNING atfgraph.server: lease lost run_id=R9 attempt=3" in line


def test_log_set_up_refuses_unknown_formats_and_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATFGRAPH_LOG_FORMAT", "json")
    assert log_format(None) == "json" and log_format("text") == "text"
    monkeypatch.setenv("ATFGRAPH_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="'text' or 'json'"):
        log_format(None)
    assert log_level("Info") == logging.INFO
    with pytest.raises(ValueError, match="log level"):
        log_level("loud")


def _sample(name: str, **labels: str) -> float:
    got = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if got is None else got


def test_the_attempt_after_a_resolution_observes_it_once() -> None:
    now = time.time()
    decided = _sample("pyworkflow_decision_to_running_seconds_count", kind="approval")
    fired = _sample("pyworkflow_timers_fired_total", kind="timer")
    # A decision 2 s ago, nothing created since: the continuation observes it.
    metrics.observe_continuation([("approval", "received", now - 10, None, now - 2)], now)
    assert _sample("pyworkflow_decision_to_running_seconds_count", kind="approval") == decided + 1
    # A later attempt of the same run finds a newer wait: nothing is observed again.
    metrics.observe_continuation(
        [("approval", "received", now - 10, None, now - 2), ("hook", "pending", now - 1, None, None)], now
    )
    assert _sample("pyworkflow_decision_to_running_seconds_count", kind="approval") == decided + 1
    # A sleep due 3 s ago that expired 1 s ago: a timer fired, 3 s late when the run went on.
    lateness = _sample("pyworkflow_timer_lateness_seconds_sum", kind="timer")
    metrics.observe_continuation([("timer", "expired", now - 5, now - 3, now - 1)], now)
    assert _sample("pyworkflow_timers_fired_total", kind="timer") == fired + 1
    assert _sample("pyworkflow_timer_lateness_seconds_sum", kind="timer") == pytest.approx(lateness + 3)
    # Nothing resolved (a first attempt, a cancelled wait): nothing observed.
    metrics.observe_continuation([("hook", "cancelled", now - 5, None, now - 1)], now)
    assert _sample("pyworkflow_timers_fired_total", kind="timer") == fired + 1


def _families(collector: metrics.StoreCollector) -> dict[str, list[Any]]:
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in collector.collect()}


def test_the_state_collector_counts_what_the_database_holds(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "state.db"))
    try:
        with sqlite3.connect(tmp_path / "state.db") as conn:
            conn.executemany(
                "INSERT INTO runs (id, workflow, status, input, created_at, updated_at, node_id)"
                " VALUES (?, 'w', ?, x'', 0, 0, ?)",
                [("r1", "completed", None), ("r2", "completed", None), ("r3", "suspended", "tester")],
            )
            conn.executemany(
                "INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, status, created_at)"
                " VALUES (?, 'r3', ?, ?, 'n', '', ?, ?)",
                [("w1", "k1", "approval", "pending", time.time() - 30), ("w2", "k2", "hook", "received", 0)],
            )
        collector = metrics.StoreCollector(store.database.read)
        got = _families(collector)
        assert got["pyworkflow_store_up"] == [({}, 1.0)]
        assert sorted(got["pyworkflow_runs"], key=str) == sorted(
            [
                ({"status": "completed", "kind": "workflow"}, 2.0),
                ({"status": "suspended", "kind": "traverser"}, 1.0),
            ],
            key=str,
        )
        assert got["pyworkflow_waits_pending"] == [({"kind": "approval"}, 1.0)]
        ((labels, age),) = got["pyworkflow_oldest_pending_wait_age_seconds"]
        assert labels == {"kind": "approval"} and 29 <= age <= 60
        collector.close()
    finally:
        store.close()


def test_the_state_reads_walk_the_metrics_indexes(store_url: str) -> None:
    """Both dialects can answer the scrape from the indexes alone (PostgreSQL: told to avoid the
    sequential and bitmap scans it prefers on tables this small)."""
    store = open_store(store_url)
    postgres = store_url.startswith("postgresql")

    def plan(sql: str) -> str:
        def fn(conn: Any) -> list[Any]:
            if postgres:
                conn.raw.execute("SET LOCAL enable_seqscan = off")
                conn.raw.execute("SET LOCAL enable_bitmapscan = off")  # on empty tables it ties
                return conn.raw.execute("EXPLAIN " + sql).fetchall()
            return conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()

        return " ".join(str(r[-1]) for r in store.database.read(fn))

    try:
        if postgres:
            runs = plan(metrics.SQL_RUNS_BY_STATUS)
            assert (
                "Index Only Scan using runs_by_status" in runs
                and "Index Only Scan using runs_remote_by_status" in runs
            )
            assert "Index Only Scan using waits_pending_by_kind" in plan(metrics.SQL_PENDING_WAITS)
        else:
            runs = plan(metrics.SQL_RUNS_BY_STATUS)
            assert "COVERING INDEX runs_by_status" in runs and "COVERING INDEX runs_remote_by_status" in runs
            assert "COVERING INDEX waits_pending_by_kind" in plan(metrics.SQL_PENDING_WAITS)
    finally:
        store.close()


def test_a_failed_state_read_reports_the_store_down_and_still_answers() -> None:
    def unreachable(fn: Any) -> Any:
        raise sqlite3.OperationalError("unable to open database file")

    collector = metrics.StoreCollector(unreachable)
    try:
        assert _families(collector) == {"pyworkflow_store_up": [({}, 0.0)]}
    finally:
        collector.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"log_format": "xml"}, "atfgraph: log format must be 'text' or 'json', not 'xml'"),
        ({"log_level": "loud"}, "atfgraph: log level must be debug, info, warning, error or critical"),
        ({"metrics_bind": "9464"}, "atfgraph: --metrics-bind must be HOST:PORT, not '9464'"),
        ({"metrics_bind": "127.0.0.1:99999"}, "atfgraph: --metrics-bind must be HOST:PORT"),
    ],
)
def test_the_server_refuses_bad_logging_and_metrics_options_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    options: dict[str, str],
    message: str,
) -> None:
    from atfgraph.server._serve import serve

    monkeypatch.setenv("ATFGRAPH_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as raised:
        serve(port=1, db_path=str(tmp_path / "graph.db"), **options)
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
    assert not list(tmp_path.iterdir())  # nothing was created


def test_pyworkflow_worker_refuses_a_bad_log_format_and_metrics_port() -> None:
    from click.testing import CliRunner

    from pyworkflow.cli import main

    runner = CliRunner()
    common = ["worker", "--storage", "postgresql://u@127.0.0.1:1/x"]
    bad_format = runner.invoke(main, [*common, "--log-format", "xml"])
    assert bad_format.exit_code == 2 and "'xml' is not one of 'text', 'json'" in bad_format.output
    bad_port = runner.invoke(main, [*common, "--metrics-port", "70000"])
    assert bad_port.exit_code == 2 and "70000 is not in the range 0<=x<=65535" in bad_port.output
