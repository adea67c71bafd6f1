"""PostgreSQL only: the run queue's vacuum (``QueueVacuum``). It vacuums ``queue`` once the table
has ``dead_rows`` dead row versions, looks no more often than every ``every`` seconds, never
waits for the database in ``tick``, skips a pass while another vacuum holds the table, stops for
good (with one warning) when the role may not vacuum it, and survives a database it cannot
reach."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from pg_queue import churn, queue_stats, without_autovacuum
from pyworkflow.store import PostgresDatabase, QueueVacuum, SQLiteDatabase, metrics, pyworkflow_migrations

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(pg_database: str) -> Iterator[str]:
    """A database with pyworkflow's tables, whose queue autovacuum leaves alone."""
    PostgresDatabase(pg_database, migrations=pyworkflow_migrations("postgres")).close()
    without_autovacuum(pg_database)
    yield pg_database


def outcomes() -> dict[str, float]:
    """``pyworkflow_queue_vacuums_total`` of this process, by outcome."""
    return {
        outcome: metrics.REGISTRY.get_sample_value("pyworkflow_queue_vacuums_total", {"outcome": outcome})
        or 0.0
        for outcome in ("vacuumed", "skipped", "refused", "failed")
    }


def counted(before: dict[str, float], **expected: float) -> None:
    """The counter rose by ``expected`` for those outcomes since ``before``, and not for others."""
    now = outcomes()
    assert {k: now[k] - before[k] for k in now} == {k: expected.get(k, 0.0) for k in now}


def looked(vacuum: QueueVacuum) -> None:
    assert vacuum.tick(), "a look was due"
    vacuum.wait(10)


def test_the_queue_is_vacuumed_once_it_has_enough_dead_rows(url: str) -> None:
    vacuum = QueueVacuum(url, dead_rows=500, every=0.5)
    before = outcomes()
    try:
        churn(url, 300)
        looked(vacuum)
        assert (vacuum.vacuums, queue_stats(url)) == (0, (300, False))  # below the threshold: left
        assert not vacuum.tick(), "looked again before `every` had passed"
        churn(url, 300)
        time.sleep(0.55)
        looked(vacuum)
        assert vacuum.vacuums == 1 and vacuum.refused is None
        assert queue_stats(url) == (0, True)
        counted(before, vacuumed=1)
    finally:
        vacuum.close()
    assert not vacuum.tick(), "a closed vacuum looked again"


def test_a_pass_is_skipped_while_another_vacuum_holds_the_table(url: str) -> None:
    vacuum = QueueVacuum(url, dead_rows=100, every=0.01)
    before = outcomes()
    try:
        churn(url, 200)
        with psycopg.connect(url) as other:  # what a running VACUUM holds
            other.execute("LOCK TABLE queue IN SHARE UPDATE EXCLUSIVE MODE")
            started = time.monotonic()
            looked(vacuum)
            assert time.monotonic() - started < 5  # skipped, not queued behind the lock
            assert (vacuum.vacuums, vacuum.refused) == (0, None)
            assert queue_stats(url) == (200, False)
        time.sleep(0.02)
        looked(vacuum)  # the lock is gone: this pass vacuums
        assert (vacuum.vacuums, vacuum.refused) == (1, None)
        assert queue_stats(url) == (0, True)
        counted(before, skipped=1, vacuumed=1)
    finally:
        vacuum.close()


def test_a_role_that_may_not_vacuum_the_queue_stops_trying_with_one_warning(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"pwtest_reader_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    parts = urlsplit(url)
    as_role = urlunsplit((parts.scheme, f"{role}@{parts.hostname}:{parts.port or 5432}", parts.path, "", ""))
    vacuum = QueueVacuum(as_role, dead_rows=100, every=0.01)
    before = outcomes()
    try:
        churn(url, 200)
        with caplog.at_level(logging.WARNING, logger="pyworkflow.postgres"):
            looked(vacuum)
            time.sleep(0.02)
            assert not vacuum.tick(), "it tried again after PostgreSQL refused"
        assert vacuum.refused is not None and vacuum.vacuums == 0
        assert [r.levelno for r in caplog.records] == [logging.WARNING], caplog.text
        assert "stops vacuuming the run queue" in caplog.text and vacuum.refused in caplog.text
        counted(before, refused=1)
        assert queue_stats(url) == (200, False)
    finally:
        vacuum.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")


def test_a_database_it_cannot_reach_is_tried_again_later(url: str) -> None:
    """A failed look (here: no such database) raises nothing and stops nothing; the pause doubles
    after each failure, as while vacuums remove nothing, and a look that works resets it."""
    parts = urlsplit(url)
    missing = urlunsplit((parts.scheme, parts.netloc, f"/pwtest_missing_{secrets.token_hex(4)}", "", ""))
    vacuum = QueueVacuum(missing, dead_rows=100, every=0.05)
    before = outcomes()
    try:
        looked(vacuum)  # does not raise: the failure is the look's, and logged at debug level
        assert vacuum.pause == 0.1
        time.sleep(0.12)
        looked(vacuum)
        assert (vacuum.vacuums, vacuum.refused, vacuum.pause) == (0, None, 0.2)
        vacuum.url = url  # the database is back
        time.sleep(0.22)
        looked(vacuum)
        assert (vacuum.vacuums, vacuum.refused, vacuum.pause) == (0, None, 0.05)  # nothing to vacuum
        counted(before, failed=2)
    finally:
        vacuum.close()


def test_only_postgresql_databases_get_one_and_the_settings_are_checked(url: str, tmp_path: Path) -> None:
    sqlite = SQLiteDatabase(tmp_path / "x.db")
    pg = PostgresDatabase(url)
    try:
        assert QueueVacuum.of(sqlite) is None
        assert QueueVacuum.of(None) is None
        made = QueueVacuum.of(pg)
        assert made is not None and made.url == url
        made.close()
    finally:
        sqlite.close()
        pg.close()
    for bad in ({"dead_rows": 0}, {"every": 0}, {"every": float("nan")}, {"every": -1}):
        with pytest.raises(ValueError, match="dead_rows must be at least 1 and every positive"):
            QueueVacuum(url, **bad)  # type: ignore[arg-type]


def test_the_looks_back_off_while_an_old_transaction_keeps_the_dead_rows(url: str) -> None:
    """A transaction that began before the rows died still sees them: a vacuum then removes
    nothing, and vacuuming again every second would only cost. The pause doubles after each such
    vacuum (up to a minute) and is back to ``every`` once a vacuum removed them."""
    vacuum = QueueVacuum(url, dead_rows=100, every=0.1)
    try:
        with psycopg.connect(url) as old:
            old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            old.execute("SELECT count(*) FROM queue")  # its snapshot predates the churn
            churn(url, 200)
            looked(vacuum)
            assert (vacuum.vacuums, vacuum.pause) == (1, 0.2)
            assert queue_stats(url) == (200, True)  # vacuumed, and nothing removed
            time.sleep(0.25)
            looked(vacuum)
            assert (vacuum.vacuums, vacuum.pause) == (2, 0.4)
            assert not vacuum.tick(), "looked again before the longer pause had passed"
        time.sleep(0.45)
        looked(vacuum)  # the old transaction ended: the rows go, and the pause with them
        assert (vacuum.vacuums, vacuum.pause) == (3, 0.1)
        assert queue_stats(url)[0] == 0
    finally:
        vacuum.close()
