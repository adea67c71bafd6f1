"""The graph server's sweeper reads three index entries a tick when nothing is due
(``SQL_SWEEP_DUE``), on a new database as on a full one: generic plans are what a server's
long-lived connections keep (psycopg prepares a statement on its fifth run, four sweeps a second
get there in about a second, before ``waits`` has statistics), so the tests force them. Written
with MIN(), the deadline's lookup planned on a new database read every pending wait
(waits_pending_by_kind) instead of the first entry of waits_due.

After a sweep that expired something, the nodes to wake (``SQL_NODES_WITH_WORK``) are found a
node at a time through queue_ready, not by reading every due queue row (a backlog of 100,000
queued traversers: 55 ms in the sweep's transaction)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from atfgraph.server._graph_sql import SQL_NODES_WITH_WORK, SQL_SWEEP_DUE
from atfgraph.server._store import GraphStore

#: Each lookup of the statement and the index that must serve it, first entry first.
INDEXES = ("atfg_assignments_escalating", "waits_due", "queue_leases")


def test_sqlite_sweep_due_reads_the_first_entry_of_each_index(tmp_path: Path) -> None:
    GraphStore(str(tmp_path / "g.db")).close()
    conn = sqlite3.connect(tmp_path / "g.db")
    try:
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL_SWEEP_DUE, (1.0, 1.0, 1.0))]
        assert conn.execute(SQL_SWEEP_DUE, (1.0, 1.0, 1.0)).fetchone() == (None, None, None)
    finally:
        conn.close()
    # Each a search of its index or a walk of it in order (stopped by the LIMIT), never of a table.
    reads = [step for step in plan if step.startswith(("SEARCH", "SCAN")) and step != "SCAN CONSTANT ROW"]
    assert [step.split(" ")[1] for step in reads] == ["atfg_assignments", "waits", "queue"], plan
    for step, index in zip(reads, INDEXES, strict=True):
        assert f" USING INDEX {index}" in step or f" USING COVERING INDEX {index}" in step, plan
    assert not [step for step in plan if "TEMP B-TREE" in step], plan  # the indexes give the order


@pytest.mark.postgres
@pytest.mark.parametrize("rows", [0, 20_000], ids=["new database", "20,000 pending waits"])
def test_postgresql_sweep_due_reads_the_first_entry_of_each_index(pg_database: str, rows: int) -> None:
    GraphStore(pg_database).close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        if rows:
            conn.execute(
                "INSERT INTO runs (id, workflow, status, input, created_at, updated_at)"
                " SELECT 'r' || i, 'wf', 'suspended', '{}', 0, 0 FROM generate_series(1, %s) i",
                (rows,),
            )
            conn.execute(  # half of them with a deadline, as bench.parked parks them
                "INSERT INTO waits (id, run_id, wait_key, kind, name, status, created_at, expires_at)"
                " SELECT 'w' || i, 'r' || i, 'k', 'step_hook', 'k', 'pending', 0,"
                " CASE WHEN i %% 2 = 0 THEN 1e9 + i END FROM generate_series(1, %s) i",
                (rows,),
            )
        conn.execute("SET plan_cache_mode = force_generic_plan")
        statement = SQL_SWEEP_DUE
        for number in (1, 2, 3):
            statement = statement.replace("?", f"${number}", 1)
        conn.execute(f"PREPARE sweep_due (float8, float8, float8) AS {statement}")
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN EXECUTE sweep_due (2e9, 2e9, 2e9)"))
        for index in INDEXES:
            assert f"using {index} on" in plan, plan
        assert "Seq Scan" not in plan and "Sort" not in plan and "waits_pending" not in plan, plan
        assert plan.count("Limit") == 3, plan  # each lookup stops at its first entry
        due = conn.execute("EXECUTE sweep_due (2e9, 2e9, 2e9)").fetchone()
        assert due == ((None, True, None) if rows else (None, None, None))


#: Three nodes' queue rows (1,000 each, due at 1 to 3,000), the first 30 leased, the local
#: runtime's rows (no node), and a node whose every due row is leased or not due yet.
QUEUE_ROWS = [
    *[(f"r{i}", float(i), f"n{i % 3}", "w" if i <= 30 else None) for i in range(1, 3001)],
    *[(f"l{i}", float(i), None, None) for i in range(1, 101)],
    ("b1", 1.0, "busy", "w"),
    ("b2", 5000.0, "busy", None),
]
QUEUE_INSERT = "INSERT INTO queue (run_id, available_at, node_id, lease_owner) VALUES (?, ?, ?, ?)"


def _nodes_with_work(execute: object, now: float) -> list[str]:
    return sorted(r[0] for r in execute(SQL_NODES_WITH_WORK, (now,)))  # type: ignore[operator]


def test_sqlite_nodes_with_work_are_found_a_node_at_a_time(tmp_path: Path) -> None:
    GraphStore(str(tmp_path / "g.db")).close()
    conn = sqlite3.connect(tmp_path / "g.db")
    try:
        conn.executemany(QUEUE_INSERT, QUEUE_ROWS)
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL_NODES_WITH_WORK, (1.0,))]
        execute = lambda sql, params: conn.execute(sql, params).fetchall()  # noqa: E731
        assert _nodes_with_work(execute, 0.5) == []  # nothing due yet
        assert _nodes_with_work(execute, 30.0) == []  # what is due is leased
        assert _nodes_with_work(execute, 31.0) == ["n1"]  # r31: its first unleased due row
        assert _nodes_with_work(execute, 33.0) == ["n0", "n1", "n2"]
        assert _nodes_with_work(execute, 1e9) == ["busy", "n0", "n1", "n2"]
    finally:
        conn.close()
    reads = [step for step in plan if " queue " in f"{step} " or " q " in f"{step} "]
    assert reads and all("INDEX queue_ready" in step for step in reads), plan
    assert not [step for step in plan if step.startswith("SCAN q")], plan
    # a node's due rows by (node, time), the first one taken: not every row with a node (node_id>?)
    assert "SEARCH q USING INDEX queue_ready (node_id=? AND available_at<?)" in plan, plan
    assert not [step for step in plan if "TEMP B-TREE" in step], plan


@pytest.mark.postgres
def test_postgresql_nodes_with_work_are_found_a_node_at_a_time(pg_database: str) -> None:
    """With the queue's statistics (autovacuum's ANALYZE), the generic plan walks queue_ready a node
    at a time and stops at each node's first due unleased row. Before any statistics PostgreSQL
    may read a node's due rows by a bitmap instead, as every due row was read before; a plan made
    then is made again when ANALYZE gives the queue its statistics."""
    GraphStore(pg_database).close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.executemany(QUEUE_INSERT.replace("?", "%s"), QUEUE_ROWS)
        conn.execute("ANALYZE queue")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE nodes_with_work (float8) AS {SQL_NODES_WITH_WORK.replace('?', '$1')}")
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN EXECUTE nodes_with_work (1e9)"))
        for absent in ("Seq Scan", "Hash", "Sort", "Bitmap"):
            assert absent not in plan, plan
        assert "Index Cond: ((node_id = nodes.node_id) AND (available_at <= $1))" in plan, plan

        def found(now: float) -> list[str]:
            return sorted(r[0] for r in conn.execute(f"EXECUTE nodes_with_work ({now!r})"))

        assert (found(0.5), found(30.0), found(31.0)) == ([], [], ["n1"])
        assert (found(33.0), found(1e9)) == (["n0", "n1", "n2"], ["busy", "n0", "n1", "n2"])
