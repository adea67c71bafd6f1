"""One SQLite database file shared by every store built on it: a single writer thread that
commits the work of many concurrent callers together (group commit), reader connections for
everyone else, and the numbered migrations applied when the file is opened.

Why a writer thread: with ``synchronous=FULL`` every commit is an fsync of the WAL. Committing the
pending transitions of all concurrent runs in one transaction makes the fsync count per run fall
below one while every caller is still released only after its own work is durable (see
:mod:`._group_commit`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ._group_commit import GroupCommitWriter
from ._migrations import Migration, apply_migrations

T = TypeVar("T")

#: A unit of work run by the writer inside a transaction; it must not commit or roll back.
WriteFn = Callable[[sqlite3.Connection], T]

_SYNCHRONOUS = {"OFF", "NORMAL", "FULL", "EXTRA"}
#: Page cache per connection, in KiB (SQLite's default is 2 MiB). Runs, steps, waits and events
#: are keyed by random ids, so a batch of writes touches pages all over each B-tree; with the
#: default cache most of them are read back from the OS on every batch. A cap, not an allocation.
_CACHE_KIB = 64 * 1024


def _connect(path: str, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
    )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    _set_wal(conn, busy_timeout_ms / 1000)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _set_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch to WAL, retrying while another process holds the file: SQLite answers "database is
    locked" at once here, without its busy handler, when two processes open a new file together."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class SQLiteDatabase(GroupCommitWriter[sqlite3.Connection]):
    """A SQLite file opened for one process: one writer thread, per-thread reader connections."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        migrations: Sequence[Migration] = (),
        synchronous: str = "FULL",
        busy_timeout_ms: int = 30_000,
    ) -> None:
        synchronous = synchronous.upper()
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, not {synchronous!r}")
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        conn = _connect(self.path, synchronous, busy_timeout_ms)
        try:
            apply_migrations(conn, migrations)
        except BaseException:
            conn.close()
            raise
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._start_writer(f"sqlite-writer:{Path(self.path).name}", conn=conn)

    # -- the writer's transactions (see GroupCommitWriter) ----------------------------------------

    def _connect_writer(self, lost: sqlite3.Connection | None) -> sqlite3.Connection:
        return _connect(self.path, self.synchronous, self._busy_timeout_ms)

    def _begin(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def _commit(self, conn: sqlite3.Connection) -> None:
        conn.execute("COMMIT")

    def _rollback(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def _close_connection(self, conn: sqlite3.Connection) -> None:
        conn.close()

    # -- reads ----------------------------------------------------------------------------------

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (autocommit; each statement sees the latest commit)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path, self.synchronous, self._busy_timeout_ms)
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` against this thread's reader inside one read transaction (a consistent snapshot)."""
        conn = self.reader()
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        self._stop_writer()
        with self._readers_lock:
            for conn in self._readers:
                with contextlib.suppress(sqlite3.ProgrammingError):
                    conn.close()
            self._readers.clear()
