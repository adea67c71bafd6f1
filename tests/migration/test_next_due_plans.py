"""The runtime's next due time and its claim are read through indexes, never by reading every
queue row: a backlog of runs waiting for their first turn (a million started at once) made every
tick read the whole queue (233 ms for the next due time alone on PostgreSQL with 555,000 rows
queued, measured with bench.parked; the claim sorted every due row).
SQLite plans are read with EXPLAIN QUERY PLAN; PostgreSQL's with sequential scans disabled
(a plan that still scans has no index to use) and generic plans, as a server's connections and
PL/pgSQL keep them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from pyworkflow.store import SQLiteStore, open_store
from pyworkflow.store._pg_sql import SQL_COUNT_READY, SQL_NEXT_WAKE, SQL_READY_IDS
from pyworkflow.store._sqlite import SQL_NEXT_DUE, SQL_NEXT_QUEUE, SQL_READY

#: The two queue lookups of pyworkflow_next_due (migration postgres 0013).
PG_QUEUE_LOOKUPS = (
    "SELECT available_at FROM queue WHERE node_id IS NULL AND lease_expires_at IS NULL"
    " ORDER BY available_at LIMIT 1",
    "SELECT lease_expires_at FROM queue WHERE node_id IS NULL AND lease_expires_at IS NOT NULL"
    " ORDER BY lease_expires_at LIMIT 1",
)
#: pyworkflow_expire_due_waits's choice of waits (migration postgres 0008), at a fixed time.
PG_DUE_WAITS = """
SELECT id, run_id, wait_key FROM waits
WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= 1e10 ORDER BY expires_at LIMIT 500
"""
#: pyworkflow_claim's choice of rows (migration postgres 0008), at a fixed time.
PG_CLAIM_ROWS = """
SELECT q.run_id FROM queue q JOIN runs r ON r.id = q.run_id
WHERE q.node_id IS NULL AND q.available_at <= 1e10
  AND (q.lease_expires_at IS NULL OR q.lease_expires_at < 1e10)
ORDER BY q.available_at LIMIT 100 FOR UPDATE OF q, r SKIP LOCKED
"""


def test_sqlite_reads_the_next_due_queue_row_through_indexes(tmp_path: Path) -> None:
    SQLiteStore(str(tmp_path / "plans.db")).close()
    conn = sqlite3.connect(tmp_path / "plans.db")
    try:
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL_NEXT_QUEUE)]
    finally:
        conn.close()
    assert not [step for step in plan if step.startswith("SCAN queue")], plan
    assert any("USING INDEX queue_ready" in step for step in plan), plan
    assert any("INDEX queue_local_leases" in step for step in plan), plan
    assert not [step for step in plan if "TEMP B-TREE" in step], plan  # the indexes give the order
    conn = sqlite3.connect(tmp_path / "plans.db")
    try:  # the claim walks queue_ready in order (SQLite takes node_id IS NULL as fixing node_id),
        # and finds each row's run by its primary key
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL_READY, (1.0, 10))]
    finally:
        conn.close()
    assert plan == [
        "SEARCH q USING INDEX queue_ready (node_id=? AND available_at<?)",
        "SEARCH r USING INDEX sqlite_autoindex_runs_1 (id=?) LEFT-JOIN",
    ], plan
    conn = sqlite3.connect(tmp_path / "plans.db")
    try:  # the runtime's one statement: the queue's two lookups and the first pending deadline
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL_NEXT_DUE)]
    finally:
        conn.close()
    assert not [step for step in plan if step.startswith("SCAN queue") or step.startswith("SCAN waits")], plan
    assert any("USING INDEX queue_ready" in step for step in plan), plan
    assert any("INDEX queue_local_leases" in step for step in plan), plan
    assert "SEARCH waits USING INDEX waits_due (expires_at>?)" in plan, plan
    assert not [step for step in plan if "TEMP B-TREE" in step], plan


@pytest.mark.postgres
def test_postgresql_reads_the_next_due_queue_row_through_indexes(pg_database: str) -> None:
    """With a backlog in the queue (20,000 unleased rows, 500 leased), as many pending deadlines,
    and no statistics (this
    machine's server runs without autovacuum, and a new database has none): ordered index scans
    that stop early, no sort of the matching rows, under the settings the functions pin."""
    open_store(pg_database).close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runs (id, workflow, status, input, created_at, updated_at)"
            " SELECT 'r' || i, 'wf', 'pending', '{}', 0, 0 FROM generate_series(1, 20500) i"
        )
        conn.execute(  # a million parked runs' deadlines, in miniature
            "INSERT INTO waits (id, run_id, wait_key, kind, name, status, created_at, expires_at)"
            " SELECT 'w' || i, 'r' || i, 'k', 'step_hook', 'k', 'pending', 0, 1e9 + i"
            " FROM generate_series(1, 20500) i"
        )
        conn.execute(
            "INSERT INTO queue (run_id, available_at, lease_owner, lease_expires_at)"
            " SELECT 'r' || i, 1000 + i, CASE WHEN i <= 500 THEN 'w' END,"
            " CASE WHEN i <= 500 THEN 5000 + i END"
            " FROM generate_series(1, 20500) i"
        )
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for function in ("pyworkflow_next_due", "pyworkflow_claim", "pyworkflow_expire_due_waits"):
            (settings,) = conn.execute(
                "SELECT proconfig FROM pg_proc WHERE proname = %s", (function,)
            ).fetchone()
            assert sorted(settings) == ["enable_bitmapscan=off", "enable_seqscan=off"], function
        for setting in settings:  # what the functions run under
            conn.execute("SET " + setting.replace("=", " = "))
        for sql in (*PG_QUEUE_LOOKUPS, PG_CLAIM_ROWS, PG_DUE_WAITS):
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + sql))
            assert "Index" in plan and "Seq Scan" not in plan and "Sort" not in plan, plan
        conn.execute("RESET ALL")
        (due,) = conn.execute("SELECT pyworkflow_next_due()").fetchone()
        assert due == 1501  # the first unleased row; the first lease runs out at 5001
        (body,) = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'pyworkflow_next_due'").fetchone()
        for sql in PG_QUEUE_LOOKUPS:  # the function runs exactly these lookups
            assert " ".join(sql.split()) in " ".join(body.split()), body
        # The Celery sweeper's wake-up, a plain statement (no settings pinned): the next due time
        # and the next deadline, the first entry of waits_due, not a read of every pending wait.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE next_wake AS {SQL_NEXT_WAKE}")
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN EXECUTE next_wake"))
        assert "waits_due" in plan and "Limit" in plan and "Seq Scan" not in plan, plan
        assert conn.execute("EXECUTE next_wake").fetchone() == (1501, 1e9 + 1)


@pytest.mark.postgres
def test_postgresql_ends_a_run_without_reading_every_pending_wait(pg_database: str) -> None:
    """pyworkflow_end_run cancels the run's pending waits found by the run's index alone, never
    with a bitmap of waits_pending (every pending wait), statistics or not; and the queue is
    vacuumed after every 1,000 changes where the server runs autovacuum."""
    open_store(pg_database).close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO waits (id, run_id, wait_key, kind, name, status, created_at, expires_at)"
            " SELECT 'w' || i, 'r' || i, 'k', 'step_hook', 'k', 'pending', 0, 1e9 + i"
            " FROM generate_series(1, 20000) i"
        )
        (body,) = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'pyworkflow_end_run'").fetchone()
        (cancel,) = [line.strip() for line in body.splitlines() if "status = 'cancelled'" in line]
        statement = cancel.replace("p_now", "$2").replace("p_run", "$1").rstrip(";")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE cancel (text, double precision) AS {statement}")
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN EXECUTE cancel ('r1', 1)"))
        assert "waits_pending" not in plan and "waits_run_id_wait_key_key" in plan, plan
        (options,) = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'queue'").fetchone()
        assert "autovacuum_vacuum_threshold=1000" in options and "autovacuum_vacuum_scale_factor=0" in options


@pytest.mark.postgres
def test_postgresql_celery_sweeper_reads_ready_rows_through_indexes(pg_database: str) -> None:
    """The Celery sweeper's ready rows (SQL_READY_IDS) come from two ordered index scans that stop
    at the limit, as a generic plan without statistics runs them: with 20,000 rows due later (runs
    sleeping, a backlog not yet due) it reads a few rows, not all of them (the statement that
    ORed both cases read every row whenever fewer than the limit were ready)."""
    open_store(pg_database).close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runs (id, workflow, status, input, created_at, updated_at)"
            " SELECT 'r' || i, 'wf', 'pending', '{}', 0, 0 FROM generate_series(1, 20500) i"
        )
        conn.execute(
            "INSERT INTO queue (run_id, available_at, lease_owner, lease_expires_at)"
            " SELECT 'r' || i, 1000 + i, CASE WHEN i <= 500 THEN 'w' END,"
            " CASE WHEN i <= 500 THEN 5000 + i END"
            " FROM generate_series(1, 20500) i"
        )
        conn.execute("SET plan_cache_mode = force_generic_plan")
        statement = SQL_READY_IDS
        for number, name in enumerate(("now", "due", "after", "limit"), 1):
            statement = statement.replace(f":{name}", f"${number}")
        conn.execute(f"PREPARE ready (float8, float8, float8, int) AS {statement}")
        # 500 unleased rows due (1501 to 2000), no lease run out, 1,000 asked for
        plan = [
            str(r[0])
            for r in conn.execute("EXPLAIN (ANALYZE, TIMING OFF) EXECUTE ready (2000, 2000, 0, 1000)")
        ]
        text = "\n".join(plan)
        assert "Seq Scan" not in text and "queue_local_ready" in text and "queue_local_leases" in text, text
        removed = [int(line.split(":")[1]) for line in plan if "Rows Removed by Filter" in line]
        assert sum(removed) <= 500, text  # at most the leased rows the first scan steps over
        rows = conn.execute("EXECUTE ready (2000, 2000, 0, 1000)").fetchall()
        assert [r[2] for r in rows] == [float(1000 + i) for i in range(501, 1001)]
        rows = conn.execute("EXECUTE ready (6000, 1000, 0, 1000)").fetchall()  # every lease ran out
        assert [r[0] for r in rows] == [f"r{i}" for i in range(1, 501)]
        # How many are ready (the sweeper weighs them against its broker's queue), counted up to
        # a limit through queue_local_ready: the due rows are read, never the 19,000 due later.
        statement = SQL_COUNT_READY.replace(":now", "$1").replace(":limit", "$2")
        conn.execute(f"PREPARE count_ready (float8, int) AS {statement}")
        plan = [
            str(r[0])
            for r in conn.execute("EXPLAIN (ANALYZE, TIMING OFF) EXECUTE count_ready (2000, 100000)")
        ]
        text = "\n".join(plan)
        assert "Seq Scan" not in text and "queue_local_ready" in text, text
        assert conn.execute("EXECUTE count_ready (2000, 100000)").fetchone() == (500,)
        assert conn.execute("EXECUTE count_ready (6000, 100000)").fetchone() == (5000,)  # 500 leases ran out
        assert conn.execute("EXECUTE count_ready (6000, 10)").fetchone() == (10,)
