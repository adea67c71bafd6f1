"""On a new PostgreSQL database an approval is found by its key, never by a scan of
waits_by_kind (kind, status, created_at).

While ``waits`` has no statistics, a lookup written ``id = ? AND kind = 'approval'`` costs the
same by the primary key and by waits_by_kind, and PostgreSQL kept the plan through waits_by_kind
for the connection: every decision, approval request and claim then read every approval (0.17 to
0.27 ms a lookup after 1,750 benchmark cycles, and growing) until autovacuum's first ANALYZE.
Generic plans are what a server's long-lived connections keep (psycopg prepares a statement on
its fifth run, PL/pgSQL caches its statements' plans), so the tests force them."""

from __future__ import annotations

import time

import psycopg
import pytest

from atfgraph.server import _graph_pg, _graph_sql
from atfgraph.server._store import GraphStore
from pyworkflow.store._pg_db import translate

#: The statements that find an approval by its id, by (run, operation key) or by its run.
BY_KEY = {
    "SQL_GET_APPROVAL": ("a-1",),
    "SQL_DECISION_TERMS": ("a-1",),
    "SQL_LOCK_APPROVAL": ("a-1",),
    "SQL_APPROVAL_BY_KEY": ("r-1", "review-1"),
    "SQL_APPROVALS_OF": ("r-1",),
}


def _new_database(url: str) -> psycopg.Connection:
    """The graph schema on the empty database, one traverser with three approvals, as a new
    server's first cycles leave it; a session that plans every statement generically."""
    GraphStore(url).close()
    conn = psycopg.connect(url, autocommit=True)
    now = time.time()
    conn.execute(
        "INSERT INTO runs (id, workflow, status, input, created_at, updated_at, node_id, max_attempts)"
        " VALUES ('r-1', 'refund', 'suspended', '{}', %s, %s, 'node', 3)",
        (now, now),
    )
    for i in range(1, 4):
        conn.execute(
            "INSERT INTO waits (id, run_id, wait_key, kind, name, status, created_at)"
            " VALUES (%s, 'r-1', %s, 'approval', %s, 'pending', %s)",
            (f"a-{i}", f"review-{i}", f"review-{i}", now),
        )
    conn.execute("SET plan_cache_mode = force_generic_plan")
    return conn


def _plan(conn: psycopg.Connection, sql: str, params: tuple[str, ...]) -> str:
    conn.execute("DEALLOCATE ALL")
    types = ", ".join("text" for _ in params)
    marks = iter(f"${i}" for i in range(1, len(params) + 1))
    conn.execute(f"PREPARE lookup ({types}) AS " + translate(sql).replace("%s", "{}").format(*marks))
    args = ", ".join(f"'{p}'" for p in params)
    return "\n".join(str(r[0]) for r in conn.execute(f"EXPLAIN EXECUTE lookup ({args})"))


@pytest.mark.parametrize("name", sorted(BY_KEY))
def test_the_servers_lookups_use_the_key(pg_database: str, name: str) -> None:
    sql = getattr(_graph_sql, name)
    with _new_database(pg_database) as conn:
        plan = _plan(conn, sql, BY_KEY[name])
    assert "waits_by_kind" not in plan, plan
    assert "waits_pkey" in plan or "waits_run_id_wait_key_key" in plan, plan


def test_the_decision_reads_its_run_by_the_key(pg_database: str) -> None:
    with _new_database(pg_database) as conn:
        plan = _plan(conn, _graph_pg.SQL_APPROVAL_RUN, ("a-1",))
    assert "waits_pkey" in plan and "waits_by_kind" not in plan, plan


def _index_scans(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE relname = 'waits'")
        return {str(name): int(n) for name, n in rows}


def test_the_functions_lookups_use_the_key(pg_database: str) -> None:
    """The server-side transitions (PL/pgSQL, whose plans are cached): deciding, requesting
    an approval that exists and reading one, ten times each, touch waits_by_kind never."""
    with _new_database(pg_database) as conn:
        before = _index_scans(pg_database)
        for _ in range(10):
            outcome = conn.execute(
                "SELECT o_outcome FROM atfg_decide('missing', 'approved', NULL, 'me', 0, NULL, NULL)"
            ).fetchone()
            assert outcome == ("missing",)
            row = conn.execute(
                "SELECT o_outcome, a_id FROM atfg_request_approval('r-1', NULL, 'review-2', NULL, NULL,"
                " NULL, false, 'new', 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
            ).fetchone()
            assert row == ("ok", "a-2")
            assert conn.execute("SELECT a_status FROM atfg_approval('a-3')").fetchone() == ("pending",)
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT 1")  # the flush happens when the session next goes idle
    deadline = time.monotonic() + 10
    while True:
        after = _index_scans(pg_database)
        used = {name: after[name] - before.get(name, 0) for name in after}
        if used["waits_pkey"] + used["waits_run_id_wait_key_key"] >= 30 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert used["waits_by_kind"] == 0, used
    assert used["waits_pkey"] >= 20 and used["waits_run_id_wait_key_key"] >= 10, used
