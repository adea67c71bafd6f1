"""SQLite's transitions written as one statement each (``pyworkflow.store._sqlite_statements``):
their refusals come before their first write and their writes are ``OR FAIL`` (no statement
journal), and a transition that fails after a write leaves nothing, because the writer rolls the
whole transaction back."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

from pyworkflow.store import SQLiteStore
from pyworkflow.store._sqlite_statements import WRITER_STATEMENTS

TRIGGERS = [s for s in WRITER_STATEMENTS if s.startswith("CREATE TEMP TRIGGER")]
#: A write in a trigger's body: to a table, or through another of these views.
WRITE = re.compile(r"\b(INSERT(?:\s+OR\s+\w+)?\s+INTO|(?<!DO )UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+(\w+)")


def body(trigger: str) -> str:
    return trigger.split("BEGIN", 1)[1].rsplit("END", 1)[0]


def test_every_transition_refuses_before_it_writes_and_writes_or_fail() -> None:
    assert len(TRIGGERS) == 8
    views = {re.search(r"INSTEAD OF INSERT ON (\w+)", t).group(1) for t in TRIGGERS}  # type: ignore[union-attr]
    for trigger in TRIGGERS:
        text = body(trigger)
        assert "ABORT" not in text and "ROLLBACK" not in text
        writes = list(WRITE.finditer(text))
        assert writes, trigger
        raises = [m.start() for m in re.finditer(r"RAISE\(", text)]
        assert all(r < writes[0].start() for r in raises), f"a refusal after a write in {trigger[:60]}"
        for m in writes:
            verb, target = m.group(1).split()[0], m.group(2)
            if target in views or verb == "DELETE":
                continue  # another transition's view; a DELETE cannot fail a constraint
            assert " OR FAIL" in m.group(1), m.group(0)


async def test_a_transition_that_fails_after_its_first_write_leaves_nothing(tmp_path: Path) -> None:
    """A run's creation whose queue row cannot be written (a stray row of that id, which the
    store's own rules never leave): its run row, written first, is rolled back with the
    transaction, and a creation in the same batch is only its own outcome."""
    store = SQLiteStore(str(tmp_path / "s.db"))
    try:
        await store.db.write(
            lambda c: c.execute("INSERT INTO queue (run_id, available_at, wake_seq) VALUES ('x', 0, 0)")
        )
        bad = store.create_run("x", "wf", b"{}", now=1.0, lease_owner="w1", lease_ttl=30)
        good = store.create_run("y", "wf", b"{}", now=1.0, lease_owner="w1", lease_ttl=30)
        outcomes = await asyncio.gather(bad, good, return_exceptions=True)
        assert isinstance(outcomes[0], sqlite3.IntegrityError) and "queue.run_id" in str(outcomes[0])
        assert await store.get_run("x") is None and await store.get_events("x") == []
        assert await store.get_run("y") is not None
        assert [e.type for e in await store.get_events("y")] == ["run_created"]
    finally:
        store.close()
