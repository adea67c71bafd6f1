"""The graph server's database on PostgreSQL, with the same shape as the SQLite one.

:class:`PostgresDatabase` offers what :class:`~pyworkflow.store._sqlite_db.SQLiteDatabase` offers
the graph store and identity (``write``/``write_sync`` through a group-committing writer thread,
``read`` in one snapshot, ``reader()`` for single statements), over synchronous psycopg
connections. The connections it hands out take the store's SQL as written for SQLite:

- ``?`` placeholders become ``%s``;
- a lock hint written as an SQL comment, ``/*FOR UPDATE*/`` or ``/*FOR UPDATE SKIP LOCKED*/``,
  becomes the clause (SQLite, which has one writer, reads it as a comment);
- rows answer both ``row[0]`` and ``row["name"]``, like ``sqlite3.Row``.

Several graph servers may share one database: every transition locks the rows it reads before
it changes them (the lock hints), claims and sweeps skip rows another server holds, and the
long-poll hub of each server hears the others' wake-ups through LISTEN/NOTIFY
(:meth:`PostgresDatabase.listen`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from pyworkflow.store._group_commit import GroupCommitWriter
from pyworkflow.store._migrations import Migration, apply_postgres_migrations

from ._dburl import redact

T = TypeVar("T")
log = logging.getLogger("atfgraph.server.postgres")

_LOCK_HINT = re.compile(r"/\*(FOR UPDATE(?: SKIP LOCKED)?)\*/")


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """SQLite-flavoured SQL to psycopg's: ``%`` escaped, ``?`` to ``%s``, lock hints applied."""
    return _LOCK_HINT.sub(r"\1", sql.replace("%", "%%").replace("?", "%s"))


class _RowBase(tuple[Any, ...]):
    __slots__ = ()
    _index: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


@functools.lru_cache(maxsize=256)
def _row_class(names: tuple[str, ...]) -> type[_RowBase]:
    return type("Row", (_RowBase,), {"__slots__": (), "_index": {n: i for i, n in enumerate(names)}})


def _row_factory(cursor: psycopg.Cursor[Any]) -> Callable[[Sequence[Any]], Any]:
    if cursor.description is None:
        return tuple
    cls = _row_class(tuple(c.name for c in cursor.description))
    return cls


class PgConnection:
    """A synchronous psycopg connection that speaks the store's SQLite-flavoured SQL."""

    __slots__ = ("raw",)

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self.raw.execute(translate(sql), params or None)

    @property
    def usable(self) -> bool:
        return not (self.raw.closed or self.raw.broken)

    def close(self) -> None:
        self.raw.close()


#: Seconds to wait for a connection to PostgreSQL before the request is a 503.
CONNECT_TIMEOUT = 10
#: Reads run on the server's event loop: one that hangs (a network problem) must not stall every
#: other request for long. Writes may wait this long for a row another server holds.
READ_TIMEOUT_MS = 10_000
LOCK_TIMEOUT_MS = 10_000


def _connect(url: str, *, options: str = "") -> PgConnection:
    raw = psycopg.connect(
        url, autocommit=True, row_factory=_row_factory, connect_timeout=CONNECT_TIMEOUT, options=options
    )
    return PgConnection(raw)


def _reader(url: str) -> PgConnection:
    return _connect(url, options=f"-c statement_timeout={READ_TIMEOUT_MS}")


def _writer(url: str) -> PgConnection:
    return _connect(url, options=f"-c lock_timeout={LOCK_TIMEOUT_MS}")


class PostgresDatabase(GroupCommitWriter[PgConnection]):
    """One PostgreSQL database opened by one graph server process."""

    def __init__(self, url: str, *, migrations: Sequence[Migration] = ()) -> None:
        self.url = url
        self.path = redact(url)  # what the server prints as its database
        self._writer = _writer(url)
        apply_postgres_migrations(self._writer.raw, migrations)
        self._local = threading.local()
        self._readers: list[PgConnection] = []
        self._readers_lock = threading.Lock()
        self._listeners: list[threading.Thread] = []
        self._notes: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._notifier: threading.Thread | None = None
        self._stopping = threading.Event()
        self._start_writer("atfgraph-pg-writer")

    # -- the writer's transactions (see GroupCommitWriter) ----------------------------------------

    def _writer_connection(self) -> PgConnection:
        if not self._writer.usable:
            log.warning("writer connection to %s lost; reconnecting", self.path)
            self._writer = _writer(self.url)
        return self._writer

    def _begin(self, conn: PgConnection) -> None:
        conn.raw.execute("BEGIN")

    def _commit(self, conn: PgConnection) -> None:
        conn.raw.execute("COMMIT")

    def _rollback(self, conn: PgConnection) -> None:
        if conn.usable and conn.raw.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.raw.execute("ROLLBACK")

    def _transient(self, exc: BaseException) -> bool:
        return isinstance(exc, pg_errors.DeadlockDetected | pg_errors.SerializationFailure)

    def _close_writer(self) -> None:
        self._writer.close()

    # -- reads ----------------------------------------------------------------------------------

    def reader(self) -> PgConnection:
        """This thread's read connection (autocommit; each statement sees the latest commit)."""
        conn: PgConnection | None = getattr(self._local, "conn", None)
        if conn is None or not conn.usable:
            conn = _reader(self.url)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def read(self, fn: Callable[[PgConnection], T]) -> T:
        """Run ``fn`` against this thread's reader in one read-only snapshot."""
        conn = self.reader()
        conn.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            return fn(conn)
        finally:
            self._rollback(conn)  # nothing to commit: ends the snapshot

    # -- wake-ups between servers ---------------------------------------------------------------

    def notify_later(self, channel: str, payload: str) -> None:
        """Send ``NOTIFY channel, payload`` soon, from a thread of its own: the notifications
        queued meanwhile go out in one statement, and the writer's transactions never wait on
        them. (Called after the transition they announce has committed.)"""
        if self._notifier is None:
            with self._readers_lock:
                if self._notifier is None:
                    self._notifier = threading.Thread(
                        target=self._notify_forever, name="atfgraph-pg-notify", daemon=True
                    )
                    self._notifier.start()
        self._notes.put((channel, payload))

    def _notify_forever(self) -> None:
        conn: PgConnection | None = None
        while True:
            first = self._notes.get()
            if first is None:
                break
            notes = [first]
            while True:
                try:
                    item = self._notes.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._notes.put(None)
                    break
                notes.append(item)
            for attempt in (1, 2):  # a connection found dead is replaced once
                try:
                    if conn is None or not conn.usable:
                        conn = _connect(self.url)
                    conn.raw.execute(
                        "SELECT pg_notify(c, p) FROM unnest(%s::text[], %s::text[]) AS n(c, p)",
                        ([c for c, _ in notes], [p for _, p in notes]),
                    )
                    break
                except psycopg.Error as exc:  # a lost wake-up only delays the others' next poll
                    if attempt == 2 or conn is None or conn.usable:
                        log.warning("could not send %d notification(s): %s", len(notes), exc)
                        break
        if conn is not None:
            conn.close()

    def listen(self, channel: str, callback: Callable[[str], None]) -> None:
        """Call ``callback(payload)`` on a daemon thread for each notification on ``channel``,
        reconnecting when the connection drops, until :meth:`close`."""

        def run() -> None:
            while not self._stopping.is_set():
                try:
                    with psycopg.connect(self.url, autocommit=True) as conn:
                        conn.execute(f"LISTEN {channel}")
                        while not self._stopping.is_set():
                            for note in conn.notifies(timeout=0.5):
                                callback(note.payload)
                except psycopg.Error as exc:
                    log.warning("listener on %s lost its connection (%s); reconnecting", self.path, exc)
                    self._stopping.wait(1.0)

        thread = threading.Thread(target=run, name=f"atfgraph-pg-listen:{channel}", daemon=True)
        thread.start()
        self._listeners.append(thread)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        self._stopping.set()
        self._stop_writer()
        if self._notifier is not None:
            self._notes.put(None)
            self._notifier.join(timeout=5)
        for thread in self._listeners:
            thread.join(timeout=5)
        with self._readers_lock:
            for conn in self._readers:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            self._readers.clear()
