"""The graph server's SQLite file shares pyworkflow's one-statement transitions
(``pyworkflow/store/_sqlite_statements.py``), which write ``OR FAIL``. SQLite gives the conflict
mode of an ``INSERT OR FAIL`` or ``UPDATE OR FAIL`` to every trigger that statement fires, over
the trigger's own clause: a trigger of atfgraph's on a table those transitions write must not
rely on one (an ``INSERT OR REPLACE`` in it would fail instead of replacing)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from atfgraph.server._store import GraphStore
from pyworkflow.store._sqlite_statements import WRITER_STATEMENTS

CLAUSE = re.compile(r"\bOR\s+(REPLACE|IGNORE|ROLLBACK|ABORT|FAIL)\b|\bON\s+CONFLICT\b", re.I)


def written_or_fail() -> dict[str, set[str]]:
    """The tables the transitions write, with the events (INSERT, UPDATE) that write them."""
    tables: dict[str, set[str]] = {}
    for statement in WRITER_STATEMENTS:
        for verb, table in re.findall(r"\b(INSERT|UPDATE) OR FAIL (?:INTO )?(\w+)", statement):
            tables.setdefault(table, set()).add(verb)
    return tables


def test_no_trigger_on_a_table_written_or_fail_has_a_conflict_clause_of_its_own(tmp_path: Path) -> None:
    store = GraphStore(str(tmp_path / "graph.db"))
    try:
        triggers = store.db.reader().execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'"
        )
        triggers = triggers.fetchall()
    finally:
        store.close()
    written = written_or_fail()
    assert {"runs", "queue", "waits", "steps", "events"} <= set(written)
    fired = [
        (name, sql)
        for name, table, sql in triggers
        if table in written
        and re.search(r"\b(?:AFTER|BEFORE|INSTEAD\s+OF)\s+(\w+)", sql, re.I).group(1).upper()
        in written[table]  # type: ignore[union-attr]
    ]
    assert [name for name, _ in fired] == ["atfg_wait_created"]  # the outbox row of a new wait
    for name, sql in fired:
        assert not CLAUSE.search(sql.split("BEGIN", 1)[1]), f"{name} has its own conflict clause"


def test_the_clause_is_overridden_as_this_file_says() -> None:
    """What the rule above guards against, shown on SQLite itself."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(
        "CREATE TABLE a (x); CREATE TABLE b (k PRIMARY KEY, v); INSERT INTO b VALUES (1, 'old');"
        " CREATE TRIGGER t AFTER INSERT ON a BEGIN INSERT OR REPLACE INTO b VALUES (1, NEW.x); END;"
    )
    conn.execute("INSERT INTO a VALUES ('plain')")
    assert conn.execute("SELECT v FROM b").fetchall() == [("plain",)]
    try:
        conn.execute("INSERT OR FAIL INTO a VALUES ('fail')")
    except sqlite3.IntegrityError as exc:
        assert "UNIQUE" in str(exc)
    else:
        raise AssertionError("the trigger's OR REPLACE was not overridden")
