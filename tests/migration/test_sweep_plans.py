"""The graph server's sweeper reads three index entries a tick when nothing is due
(``SQL_SWEEP_DUE``), on a new database as on a full one: generic plans are what a server's
long-lived connections keep (psycopg prepares a statement on its fifth run, four sweeps a second
get there in about a second, before ``waits`` has statistics), so the tests force them. Written
with MIN(), the deadline's lookup planned on a new database read every pending wait
(waits_pending_by_kind) instead of the first entry of waits_due."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from atfgraph.server._graph_sql import SQL_SWEEP_DUE
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
