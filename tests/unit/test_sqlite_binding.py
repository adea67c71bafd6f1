"""The SQLite store binds ``None``, ``bytes``, ``bool`` and its status enums as they are, without
sqlite3's adapter lookup failing on each one (``_sqlite_db.bind_as_is``): the same values land in
the database as without the adapters."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pyworkflow.store import _sqlite, _sqlite_db
from pyworkflow.store._protocol import RunStatus, StepStatus, WaitKind, WaitStatus
from pyworkflow.store._sqlite_db import SQLiteDatabase


def test_none_and_bytes_have_identity_adapters() -> None:
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)] is bytes
    adapt_none = sqlite3.adapters[(type(None), sqlite3.PrepareProtocol)]
    assert adapt_none(None) is None
    payload = b"\x00\xffbytes"
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)](payload) is payload


def test_bool_and_the_store_enums_have_adapters_too() -> None:
    assert _sqlite.SQLiteStore is not None  # the store's module registers its enums' adapters
    assert sqlite3.adapters[(bool, sqlite3.PrepareProtocol)](True) == 1
    for kind in (RunStatus, WaitStatus, WaitKind, StepStatus):
        for member in kind:
            bound = sqlite3.adapters[(kind, sqlite3.PrepareProtocol)](member)
            assert type(bound) is str and bound == member.value


_WITHOUT_ADAPTERS = """
import enum, sqlite3, sys
class Status(enum.StrEnum):
    SUSPENDED = "suspended"
    STEP_HOOK = "step_hook"
conn = sqlite3.connect(sys.argv[1])
conn.execute("CREATE TABLE t (a, b, c, d, e, f, g)")
conn.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)",
             (None, b"\\x00blob", "text", True, False, Status.SUSPENDED, Status.STEP_HOOK))
conn.commit()
"""
_READ = "SELECT *, typeof(a), typeof(b), typeof(c), typeof(d), typeof(e), typeof(f), typeof(g) FROM t"


async def test_they_bind_as_sqlite3_binds_them_without_adapters(tmp_path: Path) -> None:
    """The same values, bound through the store's database and by a process that never imported
    pyworkflow (no adapters), read back the same: values and SQLite types."""
    values = (None, b"\x00blob", "text", True, False, RunStatus.SUSPENDED, WaitKind.STEP_HOOK)
    db = SQLiteDatabase(tmp_path / "bind.db")
    try:
        await db.write(lambda conn: conn.execute("CREATE TABLE t (a, b, c, d, e, f, g)"))
        await db.write(lambda conn: conn.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)", values))
        ours = db.read(lambda conn: conn.execute(_READ).fetchone())
    finally:
        db.close()
    plain = tmp_path / "plain.db"
    subprocess.run([sys.executable, "-c", _WITHOUT_ADAPTERS, str(plain)], check=True)
    conn = sqlite3.connect(plain)
    try:
        theirs = conn.execute(_READ).fetchone()
    finally:
        conn.close()
    assert ours == theirs
    assert ours[:7] == (None, b"\x00blob", "text", 1, 0, "suspended", "step_hook")
    assert ours[7:] == ("null", "blob", "text", "integer", "integer", "text", "text")


def test_an_adapter_registered_before_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    def mine(value: bytes) -> bytes:
        return value

    monkeypatch.setitem(sqlite3.adapters, (bytes, sqlite3.PrepareProtocol), mine)
    _sqlite_db._bind_as_is()
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)] is mine
