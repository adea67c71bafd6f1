"""queue_ready holds the traversers only on PostgreSQL (pyworkflow migration 0019): a database
written before it, with pyworkflow runs queued (due, sleeping) and traversers queued for a node,
is migrated; the runs are claimed and the next due time found as before, pyworkflow's queue rows
no longer enter queue_ready, and a node's claim (a generic plan, as PL/pgSQL keeps it, once
statistics exist) still walks queue_ready in order, the plan it had before the migration."""

from __future__ import annotations

import psycopg
import pytest
from upgrades import pyworkflow_postgres_before

from pyworkflow.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres

NEW = 19  # pyworkflow's first PostgreSQL migration with queue_ready for traversers only
T0 = 1_700_000_000.0
#: A node's claim of its due rows (atfgraph's migration 0015, atfg_claim_for_report's loop).
NODE_CLAIM = """
SELECT q.run_id FROM queue q JOIN runs r ON r.id = q.run_id
WHERE q.node_id = $1 AND q.available_at <= $2 AND q.lease_owner IS NULL AND r.status = 'pending'
  AND (r.version IS NULL OR r.version = $3)
ORDER BY q.available_at LIMIT $4 FOR UPDATE OF q, r SKIP LOCKED
"""


async def test_queue_ready_after_the_migration(pg_database: str) -> None:
    old = pyworkflow_postgres_before(pg_database, NEW)
    try:
        await old.create_run("due", "wf", b"{}", now=T0, lease_owner=None, lease_ttl=30)
        await old.create_run("later", "wf", b"{}", now=T0 + 3600, lease_owner=None, lease_ttl=30)
    finally:
        old.close()
    # Traversers queued, as the graph store queues them.
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runs (id, workflow, status, input, node_id, created_at, updated_at)"
            " SELECT 't' || i, 'bench.refund', 'pending', '{}', 'n' || (i % 4), 0, 0"
            " FROM generate_series(1, 8000) i"
        )
        conn.execute(
            "INSERT INTO queue (run_id, available_at, node_id)"
            " SELECT 't' || i, 1000 + i, 'n' || (i % 4) FROM generate_series(1, 8000) i"
        )
        (before,) = conn.execute("SELECT pg_get_indexdef('queue_ready'::regclass)").fetchone()  # type: ignore[misc]
        assert "WHERE" not in before

    store = PostgresStore(pg_database)  # applies migration 19
    try:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            (after,) = conn.execute("SELECT pg_get_indexdef('queue_ready'::regclass)").fetchone()  # type: ignore[misc]
            assert after.endswith("USING btree (node_id, available_at) WHERE (node_id IS NOT NULL)"), after
        assert await store.next_due() == T0
        [claim] = await store.claim("new", limit=10, now=T0 + 1, lease_ttl=30, max_crashes=3)
        assert claim.fence.run_id == "due"
        # An hour on: the sleeping row written before the migration, and "due" again (its lease ran out).
        claims = await store.claim("new", limit=10, now=T0 + 3601, lease_ttl=30, max_crashes=3)
        assert sorted(c.fence.run_id for c in claims) == ["due", "later"]
    finally:
        store.close()

    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("ANALYZE queue, runs")  # as autovacuum would have by then
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE node_claim (text, float8, text, int) AS {NODE_CLAIM}")
        plan = [
            str(r[0])
            for r in conn.execute("EXPLAIN (ANALYZE, TIMING OFF) EXECUTE node_claim ('n1', 1e9, '1.0.0', 5)")
        ]
        text = "\n".join(plan)
        assert "queue_ready" in text and "Seq Scan" not in text and "Sort" not in text, text
        rows = conn.execute("EXECUTE node_claim ('n1', 1e9, '1.0.0', 5)").fetchall()
        assert [r[0] for r in rows] == [f"t{i}" for i in (1, 5, 9, 13, 17)]
