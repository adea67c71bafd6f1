"""One SQLite database file shared by every store built on it: a single writer thread that
commits the work of many concurrent callers together (group commit), reader connections for
everyone else, and the numbered migrations applied when the file is opened.

Why a writer thread: with ``synchronous=FULL`` every commit is an fsync of the WAL. Committing the
pending transitions of all concurrent runs in one transaction makes the fsync count per run fall
below one while every caller is still released only after its own work is durable (see
:mod:`._group_commit`).

Faults of the file itself: a write waits for a write lock another process holds at most until its
write timeout (then :class:`~pyworkflow.DatabaseUnavailableError`), and before each transaction
the writer checks that the path still names the file it opened (and the WAL it writes): a file
deleted or replaced under the process takes no more writes, since they would go to a file nobody
will open again (:meth:`SQLiteDatabase.check_file`).

**Waiting for another process's write lock.** Several processes may write one file (local
runtimes, a graph server, the CLI); SQLite lets one at a time hold its write lock. Its own busy
handler waits by sleeping longer and longer (1, 2, 5, 10, ... up to 100 ms a try), so a process
whose writer takes the lock for batch after batch (all at once, a batch of 500 runs' writes
takes some 20 ms) keeps it, while the other sleeps through the gaps: two local runtimes on one
file ran no faster than one (4,286 and 4,500 runs/s against 4,061 and 4,417, one process done
well before the other). The writer's connection therefore has no busy timeout:
:meth:`SQLiteDatabase._begin` tries ``BEGIN IMMEDIATE`` and, while the lock is taken, tries again
after a short sleep (:data:`LOCK_POLL_FIRST`, doubling to :data:`LOCK_POLL_MAX`) until the
batch's bound; the two processes then take turns, 5,049-5,251 runs/s (``python -m
bench.processes``; bench/README.md). Readers keep SQLite's handler: in WAL mode they wait for
nobody.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .._errors import DatabaseUnavailableError
from ._group_commit import WRITE_TIMEOUT, GroupCommitWriter, check_write_timeout
from ._jobs import Job, Rows
from ._migrations import Migration, apply_migrations

T = TypeVar("T")

#: A unit of work run by the writer inside a transaction; it must not commit or roll back.
WriteFn = Callable[[sqlite3.Connection], T]

_SYNCHRONOUS = {"OFF", "NORMAL", "FULL", "EXTRA"}
#: Page cache per connection, in KiB (SQLite's default is 2 MiB). Runs, steps, waits and events
#: are keyed by random ids, so a batch of writes touches pages all over each B-tree; with the
#: default cache most of them are read back from the OS on every batch. A cap, not an allocation.
_CACHE_KIB = 64 * 1024
#: WAL frames after which a commit checkpoints the log into the file (SQLite's default is 1,000,
#: about 4 MB). A checkpoint costs two fsyncs plus a write of each distinct page in the log, and
#: the commit that triggers it waits for it. With runs keyed by random ids those pages lie all
#: over a big file, so at the default one run in about fifty paid some 5 ms more for a checkpoint
#: when a million runs were parked: the p99 of a resume grew with the file. Ten times the frames
#: make checkpoints ten times rarer (under one resume in 400), and cheaper per frame, as the
#: pages written again and again (the queue, the ends of the indexes) are copied once per
#: checkpoint instead of once per thousand frames; the log grows to about 40 MB before it is
#: reused (docs/scaling.md).
WAL_AUTOCHECKPOINT_PAGES = 10_000
#: Seconds the writer sleeps before it tries again for a write lock another process holds, at
#: first and at most (doubling in between): short, so that it is there when the lock is released
#: between the other's batches; capped, so that a long wait costs about a thousand tries a second.
LOCK_POLL_FIRST = 0.0001
LOCK_POLL_MAX = 0.001


class _Connection(sqlite3.Connection):
    """A connection that remembers its busy timeout (a writer's: how long its next ``BEGIN``
    may wait for the write lock, bounded per transaction; see :meth:`SQLiteDatabase._begin`)."""

    busy_ms: int
    #: how many of the database's writer statements this connection has run (prepare_writers);
    #: a class default, so the look before each ``BEGIN`` never fails (a failed attribute
    #: lookup formats an AttributeError, some 2,000 instructions)
    prepared: int = 0


def bind_as_is(kind: type, as_is: Callable[[Any], Any]) -> None:
    """Have the sqlite3 module bind values of exactly ``kind`` through ``as_is`` (a C callable
    returning what sqlite3 would have bound anyway) instead of its failing adapter lookup.

    sqlite3 binds int, float and str directly but sends every other value, subclasses included,
    through its adapters; when none is registered that lookup ends in a failed attribute lookup
    on its PrepareProtocol class (an AttributeError formatted and thrown away, each parameter),
    and then the value is bound as it is. The engine binds ``None``, ``bytes``, ``bool`` and its
    status enums a dozen times a run. An identity adapter makes the lookup succeed at once with
    the same result. Process-wide, as sqlite3's adapters are; an adapter someone registered
    before is kept."""
    if (kind, sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(kind, as_is)


def _bind_as_is() -> None:
    bind_as_is(bytes, bytes)
    empty: dict[None, None] = {}
    bind_as_is(type(None), empty.get)  # empty.get(None) is None, in C
    bind_as_is(bool, int)  # sqlite3 binds a bool as the integer 1 or 0


_bind_as_is()


def _connect(path: str, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path,
        isolation_level=None,
        check_same_thread=False,
        timeout=busy_timeout_ms / 1000,
        factory=_Connection,
    )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.busy_ms = int(busy_timeout_ms)
    _set_wal(conn, busy_timeout_ms / 1000)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
    conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
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


def _waits_in_python(conn: sqlite3.Connection) -> None:
    """A writer's connection: no busy handler of SQLite's (the writer waits for the lock itself,
    :meth:`SQLiteDatabase._begin`); its migrations are applied already, with the handler."""
    conn.execute("PRAGMA busy_timeout = 0")


def _locked(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY: another connection holds the lock needed."""
    return "database is locked" in str(exc) or "database is busy" in str(exc)


def _until_unlocked(conn: sqlite3.Connection, attempt: Callable[[], T]) -> T:
    """``attempt()`` on a writer's connection, outside a transaction, tried again while another
    process holds the lock it needs (SQLITE_BUSY), after a sleep of :data:`LOCK_POLL_FIRST`
    doubling to :data:`LOCK_POLL_MAX`, until the connection's bound (``busy_ms``); past it the
    error is raised (the store's :class:`~pyworkflow.DatabaseUnavailableError`)."""
    deadline = time.monotonic() + getattr(conn, "busy_ms", 0) / 1000
    pause = LOCK_POLL_FIRST
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not _locked(exc) or conn.in_transaction or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, LOCK_POLL_MAX)


def _file_id(path: str) -> tuple[int, int] | None:
    """The identity of the file at ``path`` (device, inode), or None when there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


class SQLiteDatabase(GroupCommitWriter[sqlite3.Connection]):
    """A SQLite file opened for one process: one writer thread, per-thread reader connections.

    ``write_timeout``: seconds a write may wait for the file's write lock (another process's
    transaction) before it fails with :class:`~pyworkflow.DatabaseUnavailableError`; None: no
    bound. ``busy_timeout_ms``: how long a reader waits for a lock (default: the write timeout)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        migrations: Sequence[Migration] = (),
        synchronous: str = "FULL",
        write_timeout: float | None = WRITE_TIMEOUT,
        busy_timeout_ms: int | None = None,
    ) -> None:
        check_write_timeout(write_timeout)
        synchronous = synchronous.upper()
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, not {synchronous!r}")
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.synchronous = synchronous
        if busy_timeout_ms is None:
            busy_timeout_ms = 30_000 if write_timeout is None else max(1, int(write_timeout * 1000))
        self._busy_timeout_ms = busy_timeout_ms
        conn = _connect(self.path, synchronous, busy_timeout_ms)
        try:
            apply_migrations(conn, migrations)
            _waits_in_python(conn)
        except BaseException:
            conn.close()
            raise
        #: the file opened (and its WAL, once there is one): what :meth:`check_file` compares
        self._file = None if self.path == ":memory:" else _file_id(self.path)
        self._wal: tuple[int, int] | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._writer_statements: tuple[str, ...] = ()
        self._start_writer(
            f"sqlite-writer:{Path(self.path).name}", conn=conn, write_timeout=write_timeout, inline=True
        )

    # -- the writer's transactions (see GroupCommitWriter) ----------------------------------------

    def _connect_writer(self, lost: sqlite3.Connection | None) -> sqlite3.Connection:
        conn = _connect(self.path, self.synchronous, self._busy_timeout_ms)
        try:
            _waits_in_python(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def prepare_writers(self, statements: Sequence[str]) -> None:
        """Run ``statements`` (TEMP views and triggers a store writes through, each idempotent:
        ``IF NOT EXISTS``) on every writer connection before its next transaction, and on each
        it opens later. Outside any transaction, so a rolled-back batch does not take them away."""
        self._writer_statements += tuple(s for s in statements if s not in self._writer_statements)

    def _begin(self, conn: sqlite3.Connection) -> None:
        """Begin the writer's transaction, waiting up to the connection's bound (:meth:`_bound_wait`)
        for the write lock another process holds (:func:`_until_unlocked`)."""
        self.check_file()
        try:
            self._begin_now(conn)
        except sqlite3.OperationalError as exc:
            if not _locked(exc):
                raise
            _until_unlocked(conn, lambda: self._begin_now(conn))

    def _begin_now(self, conn: sqlite3.Connection) -> None:
        """The writer statements (:meth:`prepare_writers`) this connection has not run yet, then
        ``BEGIN IMMEDIATE`` (SQLITE_BUSY at once while another process holds the write lock)."""
        statements = self._writer_statements
        done = getattr(conn, "prepared", 0)
        if done < len(statements):
            for statement in statements[done:]:
                conn.execute(statement)
            if isinstance(conn, _Connection):
                conn.prepared = len(statements)
        conn.execute("BEGIN IMMEDIATE")

    def _bound_wait(self, conn: sqlite3.Connection, seconds: float) -> None:
        if isinstance(conn, _Connection):
            conn.busy_ms = (
                self._busy_timeout_ms
                if seconds * 1000 >= self._busy_timeout_ms
                else max(1, int(seconds * 1000))
            )

    def _send_one(self, conn: sqlite3.Connection, job: Job) -> Rows:
        """A statement alone (autocommit), waiting for another process's write lock as
        :meth:`_begin` does (nothing of a statement refused for the lock was written)."""
        return _until_unlocked(conn, lambda: super(SQLiteDatabase, self)._send_one(conn, job))

    def _unavailable(self, exc: BaseException) -> bool:
        # SQLITE_BUSY past the busy timeout: another process holds the write lock.
        return super()._unavailable(exc) or (isinstance(exc, sqlite3.OperationalError) and _locked(exc))

    def check_file(self) -> None:
        """Raise :class:`~pyworkflow.DatabaseUnavailableError` if the path no longer names the
        file this process opened, or its WAL was deleted or replaced: writes would go to files
        nobody will open again. (Reads of what was committed still work.)"""
        if self._file is None:
            return
        now = _file_id(self.path)
        if now != self._file:
            what = "deleted" if now is None else "replaced by another file"
            raise DatabaseUnavailableError(
                f"the database file {self.path} was {what} while this process had it open; "
                "it takes no more writes (restore the file, or restart the process)"
            )
        wal = _file_id(self.path + "-wal")
        if wal is None and self._wal is None:
            return
        if self._wal is None:
            self._wal = wal
        elif wal != self._wal:
            what = "deleted" if wal is None else "replaced by another file"
            raise DatabaseUnavailableError(
                f"the write-ahead log {self.path}-wal was {what} while this process had it open; "
                "the database takes no more writes (restart the process)"
            )

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
