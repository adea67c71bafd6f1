"""The run queue's dead rows on PostgreSQL, made and read in a test (the queue's vacuum,
``pyworkflow.store.QueueVacuum``, and the loops that tick it)."""

from __future__ import annotations

import secrets
import time

import psycopg


def without_autovacuum(url: str) -> None:
    """Keep autovacuum off ``queue``, so that only the vacuum under test removes its dead rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE queue SET (autovacuum_enabled = false)")


def churn(url: str, rows: int) -> None:
    """Leave ``rows`` dead row versions in ``queue``, and return once PostgreSQL counts them."""
    tag = f"churn-{secrets.token_hex(6)}"
    dead_before = queue_stats(url)[0]
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            for i in range(rows):
                conn.execute("INSERT INTO queue (run_id, available_at) VALUES (%s, 1e12)", (f"{tag}-{i}",))
        conn.execute("DELETE FROM queue WHERE run_id LIKE %s", (f"{tag}-%",))
        if conn.info.server_version >= 150000:  # before 15, the counts go out when the session ends
            conn.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + 10
    while queue_stats(url)[0] < dead_before + rows:
        assert time.monotonic() < deadline, f"PostgreSQL did not count the dead rows: {queue_stats(url)}"
        time.sleep(0.05)


def queue_stats(url: str) -> tuple[int, bool]:
    """The queue's dead row count and whether anyone but autovacuum has vacuumed it."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT n_dead_tup, last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'queue'"
        ).fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


def wait_vacuumed(url: str, seconds: float) -> None:
    """Wait until something other than autovacuum has vacuumed ``queue`` (fail after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while not queue_stats(url)[1]:
        assert time.monotonic() < deadline, f"queue not vacuumed within {seconds} s: {queue_stats(url)}"
        time.sleep(0.1)
