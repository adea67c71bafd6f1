"""A PostgreSQL database opened by one process, with the same shape as the SQLite one.

:class:`PostgresDatabase` offers what :class:`~pyworkflow.store.SQLiteDatabase` offers (write
functions through the group-committing writer, ``read`` in one snapshot, ``reader()`` for single
statements), over synchronous psycopg connections, and, for :class:`~pyworkflow.store.PostgresStore`,
single statements sent by its writers in pipelined groups (:meth:`GroupCommitWriter.submit`: a
group's ``BEGIN``, statements and ``COMMIT`` are one round trip; their rows are plain tuples).

**One SQL style.** Every statement in the code is written one way, SQLite's, whichever database
runs it (the graph server's store and identity use one set of statements for both dialects;
pyworkflow's PostgreSQL store has statements of its own, written the same way), and
:func:`translate` is the one place that turns it into psycopg's:

- ``?`` placeholders (parameters a sequence) become ``%s``; ``:name`` placeholders (parameters a
  dict, as SQLite wants them) become ``%(name)s``, never in a ``::type`` cast, a string literal,
  a quoted name or a comment;
- ``%`` is escaped (a ``LIKE`` pattern keeps working);
- a lock hint written as an SQL comment, ``/*FOR UPDATE*/`` or ``/*FOR UPDATE OF r SKIP
  LOCKED*/``, becomes the clause (SQLite, which has one writer, reads it as a comment; a
  statement only PostgreSQL runs may write the clause itself).

Every path that sends a statement translates it: :meth:`PgConnection.execute` (the connections
handed to write functions and readers), :meth:`AsyncPgConnection.execute` (the PostgreSQL
store's pool) and the pipelined statements of :meth:`GroupCommitWriter.submit`. The translation
is cached, so a statement pays one dictionary look-up per execution. Rows of the synchronous
connections answer both ``row[0]`` and ``row["name"]``, like ``sqlite3.Row``.

**Inline statements.** As SQLite's inline writes (``_group_commit``), a statement whose caller
has nobody to share a commit with (every writer idle, no caller's job queued, at most
``INLINE_MAX_READY`` other callbacks ready on its event loop: one run at a time) is sent on the
caller's own thread, on a connection kept for that (``inline=True``:
:class:`~pyworkflow.store.PostgresStore`), instead of two thread hand-offs to a writer and back:
about 90 µs of a statement's 160 and two thirds of its CPU here. The deferred statements queued
meanwhile ride along in its transaction (a write's, not a read's), sorted by run as a writer's
group is, so they still cost no commit of their own. That connection waits at most
:data:`INLINE_LOCK_MS` for a lock: a statement that would wait longer (another process holds its
run) is rolled back and handed to the writers, as is any transaction that fails (nothing of it
committed; the writers then give each statement its own outcome). A connection lost on the way
fails the callers as a writer's would: whether it committed is unknown.

Several processes may share one database: every transition locks the rows it reads before it
changes them (the lock hints), claims and sweeps skip rows another process holds, and each
process hears the others' wake-ups through LISTEN/NOTIFY (:meth:`PostgresDatabase.listen`).

psycopg is the postgres extra's: import this module only for a PostgreSQL URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import re
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from ._group_commit import WRITE_TIMEOUT, GroupCommitWriter, check_write_timeout
from ._inline import _MANY, INLINE_MAX_READY
from ._jobs import _PENDING, MAX_GROUP, Job, Rows, _by_key, _deliver
from ._metrics import GROUP_COMMITS
from ._migrations import Migration, apply_postgres_migrations
from ._url import redact_url

T = TypeVar("T")
log = logging.getLogger("pyworkflow.store.postgres")
#: Milliseconds an inline statement waits for a row lock before its transaction is rolled back
#: and handed to the writers (which wait as long as it takes).
INLINE_LOCK_MS = 5
#: Seconds the caller's thread waits to open the inline connection before the writers take over.
INLINE_CONNECT_TIMEOUT = 2

_LOCK_HINT = re.compile(r"/\*(FOR UPDATE(?: OF \w+(?:, \w+)*)?(?: SKIP LOCKED)?)\*/")
# What a named translation steps over (a string literal, a quoted name, a comment, a cast's
# ``::``) or replaces (a ``:name`` placeholder, group 1).
_NAMED = re.compile(
    r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|/\*.*?\*/|--[^\n]*|::|(?<!\w):([A-Za-z_]\w*)""", re.DOTALL
)


def _named_mark(match: re.Match[str]) -> str:
    name = match[1]
    return match[0] if name is None else f"%({name})s"


@functools.lru_cache(maxsize=1024)
def translate(sql: str, named: bool = False) -> str:
    """A statement in the kit's SQL as psycopg takes it, executed with parameters (a dict when
    ``named``, else a sequence): ``%`` escaped, ``?`` to ``%s`` (positional) or ``:name`` to
    ``%(name)s`` (named; casts, literals, quoted names and comments untouched), lock hints applied.

    The callers translate at every execution (cached: one look-up) and hand psycopg
    ``params or ()``: psycopg reads placeholders and ``%%`` only in a statement given parameters,
    an empty sequence included (which it still sends as a simple query)."""
    sql = sql.replace("%", "%%")
    sql = _NAMED.sub(_named_mark, sql) if named else sql.replace("?", "%s")
    return _LOCK_HINT.sub(r"\1", sql)


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


#: A statement's parameters: a sequence for ``?`` placeholders, a dict for ``:name`` ones.
Params = Sequence[Any] | dict[str, Any]


def for_psycopg(sql: str, params: Params | None) -> tuple[str, Params]:
    """A statement and its parameters as psycopg's ``execute`` takes them (see :func:`translate`):
    every path that sends the kit's SQL to PostgreSQL goes through here."""
    return translate(sql, isinstance(params, dict)), params or ()


def _statement(job: Job) -> tuple[str, Params]:
    """A writer's statement job (``sql`` set, not ``fn``) as psycopg takes it."""
    assert job.sql is not None
    return for_psycopg(job.sql, job.params)


#: Reads of an idle connection's socket before :func:`dropped` gives up looking (a goodbye and
#: the end of the stream are two; a notification is one).
_LOOKS = 4


async def check_pooled(raw: psycopg.AsyncConnection[Any]) -> None:
    """A connection pool's ``check``: a connection the server ended while it sat in the pool is
    replaced before it is lent (see :func:`dropped`; no round trip)."""
    if dropped(raw):
        raise psycopg.OperationalError("the server ended this connection while it was idle")


def dropped(raw: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``raw`` cannot serve a statement: closed, broken, or ended by the server while it
    sat idle (PostgreSQL restarted or failed over, ``pg_terminate_backend``). The last is found
    without a round trip: with no statement in flight the server has nothing to say, so bytes
    waiting on the socket are its goodbye and the end of the stream (the connection is gone),
    or a notice or notification (read into libpq's buffer; the connection stays). Without this
    the first statement on each such connection failed, its caller unable to know whether it
    had committed, although nothing had been sent. A connection in a transaction is left to its
    statements. (A goodbye whose end of stream has not arrived yet passes as alive: that
    microsecond's statement fails as before.)"""
    if raw.closed or raw.broken:
        return True
    if raw.info.transaction_status != TransactionStatus.IDLE:
        return False
    pgconn = raw.pgconn
    poller = select.poll()  # not select.select: a process with many sockets has fds past 1024
    poller.register(pgconn.socket, select.POLLIN)
    for _ in range(_LOOKS):
        if not poller.poll(0):
            return False
        try:
            pgconn.consume_input()
        except psycopg.OperationalError:
            return True
    return pgconn.status != pq.ConnStatus.OK


#: Cursors a connection keeps for its writer's statement groups (a group's ``BEGIN``, statements
#: and ``COMMIT``; those beyond it get cursors of their own, as before).
KEPT_CURSORS = MAX_GROUP + 2


class PgConnection:
    """A synchronous psycopg connection that speaks the kit's SQL (see :func:`translate`).

    The statements of a writer's group each need a cursor of their own (a pipeline delivers each
    statement's result to its cursor). :meth:`statement_cursors` keeps them from group to group:
    a cursor made per statement cost about half of the writer's CPU per statement (each new one
    builds its adapters map and looks up every parameter's dumper again: 50 against 22 µs a
    statement in a pipeline of 256 inserts). Only the thread holding the connection uses them."""

    __slots__ = ("_cursors", "raw")

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw
        self._cursors: list[psycopg.Cursor[tuple[Any, ...]]] = []

    def statement_cursors(self, count: int) -> list[psycopg.Cursor[tuple[Any, ...]]]:
        """``count`` cursors yielding plain tuples, for the statements of one group: the kept ones
        first (made as needed, up to :data:`KEPT_CURSORS`), then new ones."""
        kept = self._cursors
        while len(kept) < min(count, KEPT_CURSORS):
            kept.append(self.raw.cursor(row_factory=tuple_row))
        if count <= len(kept):
            return kept[:count]
        return kept + [self.raw.cursor(row_factory=tuple_row) for _ in range(count - len(kept))]

    @staticmethod
    def rows(cursors: list[psycopg.Cursor[tuple[Any, ...]]]) -> list[Rows]:
        """The rows of each of ``cursors`` (from :meth:`statement_cursors`), once their statements
        ran. Each result is cleared once read: a kept cursor holds no copy of its rows."""
        values = []
        for cur in cursors:
            values.append(_rows_of(cur))
            res = cur.pgresult
            if res is not None:
                res.clear()
        return values

    def forget_cursors(self) -> None:
        """Let every kept cursor go (after a group failed: the next one starts afresh)."""
        self._cursors = []

    def execute(self, sql: str, params: Params | None = ()) -> psycopg.Cursor[Any]:
        return self.raw.execute(*for_psycopg(sql, params))

    @property
    def usable(self) -> bool:
        return not dropped(self.raw)

    def close(self) -> None:
        self.raw.close()


class AsyncPgConnection:
    """An asynchronous psycopg connection (one of the PostgreSQL store's pool, lent for one
    transaction) that speaks the kit's SQL (see :func:`translate`)."""

    __slots__ = ("raw",)

    def __init__(self, raw: psycopg.AsyncConnection[Any]) -> None:
        self.raw = raw

    async def execute(self, sql: str, params: Params | None = ()) -> psycopg.AsyncCursor[Any]:
        return await self.raw.execute(*for_psycopg(sql, params))


#: Seconds to wait for a connection to PostgreSQL before the request is a 503.
CONNECT_TIMEOUT = 10
#: Reads run on the server's event loop: one that hangs (a network problem) must not stall every
#: other request for long. Writes may wait this long for a row another server holds.
READ_TIMEOUT_MS = 10_000
LOCK_TIMEOUT_MS = 10_000


def _connect(
    url: str, *, options: str | None = None, connect_timeout: int | None = CONNECT_TIMEOUT
) -> PgConnection:
    raw = psycopg.connect(
        url, autocommit=True, row_factory=_row_factory, connect_timeout=connect_timeout, options=options
    )
    return PgConnection(raw)


def _discard(conn: PgConnection | None) -> None:
    """Close a connection being replaced (found dropped, or lost), whatever state it is in."""
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


def _flat(jobs: list[Job]) -> list[Job]:
    """``jobs`` with the statements each one carries just before it, leaving them carried (the
    writers unpack them again if the jobs go to them)."""
    flat: list[Job] = []

    def add(job: Job) -> None:
        for each in job.carried or ():
            add(each)
        flat.append(job)

    for job in jobs:
        add(job)
    return flat


def _reader(url: str) -> PgConnection:
    return _connect(url, options=f"-c statement_timeout={READ_TIMEOUT_MS}")


def _rows_of(cur: psycopg.Cursor[Any]) -> Rows:
    res = cur.pgresult
    return cur.fetchall() if res is not None and res.status == pq.ExecStatus.TUPLES_OK else []


class PostgresDatabase(GroupCommitWriter[PgConnection]):
    """One PostgreSQL database opened by one process: ``writers`` writer threads (the first one's
    connection applies ``migrations`` before anything else runs), per-thread readers, LISTEN/NOTIFY.

    Writer connections wait at most ``lock_timeout_ms`` for a lock and ``connect_timeout`` seconds
    to connect (None: PostgreSQL's and libpq's defaults); a write not started within
    ``write_timeout`` seconds of its submission fails with
    :class:`~pyworkflow.DatabaseUnavailableError` (None: no bound)."""

    def __init__(
        self,
        url: str,
        *,
        migrations: Sequence[Migration] = (),
        writers: int = 1,
        lock_timeout_ms: int | None = LOCK_TIMEOUT_MS,
        connect_timeout: int | None = CONNECT_TIMEOUT,
        name: str = "pg-writer",
        write_timeout: float | None = WRITE_TIMEOUT,
        inline: bool = False,
    ) -> None:
        check_write_timeout(write_timeout)
        self.url = url
        self.path = redact_url(url)  # what a server prints as its database
        self._writer_options = None if lock_timeout_ms is None else f"-c lock_timeout={int(lock_timeout_ms)}"
        self._connect_timeout = connect_timeout
        conn = self._connect_writer(None)
        try:
            apply_postgres_migrations(conn.raw, migrations)
        except BaseException:
            conn.close()
            raise
        self._local = threading.local()
        self._readers: list[PgConnection] = []
        self._readers_lock = threading.Lock()
        self._listeners: list[threading.Thread] = []
        self._notes: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._notifier: threading.Thread | None = None
        self._stopping = threading.Event()
        #: the connection inline statements use (see the module's docstring), and who has it
        self._inline: PgConnection | None = None
        self._inline_lock = threading.Lock() if inline else None
        self._start_writer(name, conn=conn, writers=writers, write_timeout=write_timeout)

    # -- the writer's transactions (see GroupCommitWriter) ----------------------------------------

    def _connect_writer(self, lost: PgConnection | None) -> PgConnection:
        if lost is not None:
            log.warning("writer connection to %s lost; reconnecting", self.path)
            _discard(lost)
        return _connect(self.url, options=self._writer_options, connect_timeout=self._connect_timeout)

    def _usable(self, conn: PgConnection) -> bool:
        return conn.usable

    def _lost(self, conn: PgConnection) -> bool:
        return conn.raw.closed

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

    def _close_connection(self, conn: PgConnection) -> None:
        conn.close()

    def _send_group(self, conn: PgConnection, jobs: list[Job]) -> None:
        # Plain BEGIN/COMMIT in the pipeline: the whole group is one message burst and one sync.
        begin, *cursors, commit = conn.statement_cursors(len(jobs) + 2)
        try:
            with conn.raw.pipeline():
                begin.execute("BEGIN")
                for job, cur in zip(jobs, cursors, strict=True):
                    cur.execute(*_statement(job))
                commit.execute("COMMIT")
        except BaseException:
            conn.forget_cursors()
            raise
        for job, value in zip(jobs, conn.rows(cursors), strict=True):
            job.value = value

    def _send_one(self, conn: PgConnection, job: Job) -> Rows:
        cursors = conn.statement_cursors(1)
        try:
            cursors[0].execute(*_statement(job))
        except BaseException:
            conn.forget_cursors()
            raise
        return conn.rows(cursors)[0]

    # -- inline statements (see the module's docstring) -------------------------------------------

    def submit(
        self,
        sql: str,
        params: Any,
        key: str | None = "",
        *,
        carried: Sequence[Job] = (),
        abandoned: Callable[[Rows], None] | None = None,
    ) -> asyncio.Future[Rows]:
        if self._inline_lock is None or key is None:  # the graph server's database: no look at the loop
            return super().submit(sql, params, key, carried=carried, abandoned=abandoned)
        loop = asyncio.get_running_loop()
        if len(getattr(loop, "_ready", _MANY)) > INLINE_MAX_READY:
            return super().submit(sql, params, key, carried=carried, abandoned=abandoned)
        future: asyncio.Future[Rows] = loop.create_future()
        job = Job(None, sql, params, key, loop, future, self._deadline(None))
        job.carried = list(carried) or None
        job.abandoned = abandoned  # settled here when sent inline: only if queued can it be
        if not self._send_inline(job):
            self._put(job)
        return future

    def _send_inline(self, job: Job) -> bool:
        """Send ``job`` with what it carries and the deferred statements queued, in one
        transaction on this thread, and settle every one; False, with nothing committed and the
        deferred statements back in the queue, when the writers must take it."""
        lock = self._inline_lock
        if lock is None or not lock.acquire(blocking=False):
            return False
        try:
            with self._mutex:
                queued = self._queue
                if (
                    self._working
                    or self._urgent
                    or self._closing
                    or any(j.fn is not None or j.key is None for j in queued)
                ):
                    return False
                # A read leaves them for a write, as a writer's batch of reads does.
                deferred = queued[: MAX_GROUP - 1] if job.key else []
                del queued[: len(deferred)]
            jobs = sorted(_flat([*deferred, job]), key=_by_key)  # stable: carried ones first
            started = time.perf_counter()
            if not self._inline_transaction(jobs):
                for each in jobs:
                    each.value, each.error = _PENDING, None
                with self._mutex:
                    queued[:0] = deferred
                    if deferred:
                        self._cv.notify()
                return False
        finally:
            lock.release()
        self.inline_commits += 1
        for each in jobs:
            each.carried = None
        future = job.future
        if job.error is not None:
            future.set_exception(job.error)
        else:
            future.set_result(job.value)
        _deliver([each for each in jobs if each is not job])
        GROUP_COMMITS.observe(time.perf_counter() - started, len(jobs))
        return True

    def _inline_transaction(self, jobs: list[Job]) -> bool:
        """Run ``jobs`` (sorted by key) in one transaction on the inline connection: True once
        each has its outcome (a lost connection's error for all of them when it went away on the
        way), False when nothing committed and the writers should run them."""
        conn = self._inline
        try:
            if conn is None or not conn.usable:
                _discard(conn)
                self._inline = None
                conn = self._inline = _connect(
                    self.url,
                    options=f"-c lock_timeout={INLINE_LOCK_MS}",
                    connect_timeout=INLINE_CONNECT_TIMEOUT,
                )
        except psycopg.Error:
            return False  # the writers connect (or wait, or fail) as usual
        try:
            if len(jobs) == 1:
                jobs[0].value = self._send_one(conn, jobs[0])
            else:
                with self._mutex:
                    self.groups += 1
                    self.statements += len(jobs)
                self._send_group(conn, jobs)
        except Exception as exc:
            self._rollback(conn)
            if not self._lost(conn):
                return False
            error = self._as_unavailable(exc)
            for each in jobs:
                each.value, each.error = _PENDING, error
        return True

    # -- reads ----------------------------------------------------------------------------------

    def reader(self) -> PgConnection:
        """This thread's read connection (autocommit; each statement sees the latest commit)."""
        conn: PgConnection | None = getattr(self._local, "conn", None)
        if conn is None or not conn.usable:
            if conn is not None:
                with self._readers_lock:
                    if conn in self._readers:
                        self._readers.remove(conn)
                _discard(conn)
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
                        target=self._notify_forever, name="pg-notify", daemon=True
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
                        _discard(conn)
                        conn = _connect(self.url)
                    conn.execute(
                        "SELECT pg_notify(c, p) FROM unnest(?::text[], ?::text[]) AS n(c, p)",
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

        thread = threading.Thread(target=run, name=f"pg-listen:{channel}", daemon=True)
        thread.start()
        self._listeners.append(thread)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        self._stopping.set()
        self._stop_writer()
        if self._inline_lock is not None:
            with self._inline_lock:  # a statement inline on another thread finishes first
                if self._inline is not None:
                    with contextlib.suppress(psycopg.Error):
                        self._inline.close()
                    self._inline = None
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
