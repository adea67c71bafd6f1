"""The SQLite store binds ``None`` and ``bytes`` as they are, without sqlite3's adapter lookup
failing on each one (``_sqlite_db._bind_as_is``): the same values land in the database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pyworkflow.store import _sqlite_db
from pyworkflow.store._sqlite_db import SQLiteDatabase


def test_none_and_bytes_have_identity_adapters() -> None:
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)] is bytes
    adapt_none = sqlite3.adapters[(type(None), sqlite3.PrepareProtocol)]
    assert adapt_none(None) is None
    payload = b"\x00\xffbytes"
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)](payload) is payload


async def test_they_bind_as_null_and_blob(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "bind.db")
    try:
        await db.write(lambda conn: conn.execute("CREATE TABLE t (a, b, c)"))
        await db.write(
            lambda conn: conn.execute("INSERT INTO t VALUES (?, ?, ?)", (None, b"\x00blob", "text"))
        )
        row = db.read(lambda conn: conn.execute("SELECT a, b, c, typeof(a), typeof(b) FROM t").fetchone())
        assert row == (None, b"\x00blob", "text", "null", "blob")
    finally:
        db.close()


def test_an_adapter_registered_before_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    def mine(value: bytes) -> bytes:
        return value

    monkeypatch.setitem(sqlite3.adapters, (bytes, sqlite3.PrepareProtocol), mine)
    _sqlite_db._bind_as_is()
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)] is mine
