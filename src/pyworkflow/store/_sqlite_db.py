"""One SQLite database file shared by every store built on it: a single writer thread that
commits the work of many concurrent callers together (group commit), reader connections for
everyone else, and the numbered migrations applied when the file is opened.

Why a writer thread: with ``synchronous=FULL`` every commit is an fsync of the WAL. Committing the
pending transitions of all concurrent runs in one transaction makes the fsync count per run fall
below one while every caller is still released only after its own work is durable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ._migrations import Migration, apply_migrations

T = TypeVar("T")

#: A unit of work run by the writer inside a transaction; it must not commit or roll back.
WriteFn = Callable[[sqlite3.Connection], T]

_MAX_BATCH = 512
_SYNCHRONOUS = {"OFF", "NORMAL", "FULL", "EXTRA"}
#: Page cache per connection, in KiB (SQLite's default is 2 MiB). Runs, steps, waits and events
#: are keyed by random ids, so a batch of writes touches pages all over each B-tree; with the
#: default cache most of them are read back from the OS on every batch. A cap, not an allocation.
_CACHE_KIB = 64 * 1024


@dataclass(slots=True)
class _Job:
    fn: WriteFn[Any]
    loop: asyncio.AbstractEventLoop | None
    future: asyncio.Future[Any] | concurrent.futures.Future[Any]


_STOP = object()


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


class SQLiteDatabase:
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
        self._writer_conn = _connect(self.path, synchronous, busy_timeout_ms)
        apply_migrations(self._writer_conn, migrations)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._closed = False
        self.commits = 0  # transactions committed by the writer; read by benchmarks
        self._thread = threading.Thread(
            target=self._run, name=f"sqlite-writer:{Path(self.path).name}", daemon=True
        )
        self._thread.start()

    # -- writes ---------------------------------------------------------------------------------

    async def write(self, fn: WriteFn[T]) -> T:
        """Run ``fn`` in a write transaction; return once it is committed (durable)."""
        if self._closed:
            raise RuntimeError("database is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(fn, loop, fut))
        return await fut

    def write_sync(self, fn: WriteFn[T]) -> T:
        """Blocking form of :meth:`write`, for code that has no event loop."""
        if self._closed:
            raise RuntimeError("database is closed")
        if threading.current_thread() is self._thread:
            raise RuntimeError("write_sync called from the writer thread")
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put(_Job(fn, None, fut))
        return fut.result()

    def _run(self) -> None:
        conn = self._writer_conn
        while True:
            first = self._jobs.get()
            if first is _STOP:
                break
            batch: list[_Job] = [first]  # type: ignore[list-item]
            stop = False
            while len(batch) < _MAX_BATCH:
                try:
                    item = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)  # type: ignore[arg-type]
            outcomes = self._commit_batch(conn, batch)
            self._deliver(batch, outcomes)
            if stop:
                break
        conn.close()

    def _commit_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> list[tuple[bool, Any]]:
        """Commit the whole batch at once; if any job raises, run each job alone so that only the
        failing one sees its error and the others still commit."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            results = [(True, job.fn(conn)) for job in batch]
            conn.execute("COMMIT")
            self.commits += 1
            return results
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if len(batch) == 1:
                return [self._run_alone(conn, batch[0])]
        return [self._run_alone(conn, job) for job in batch]

    def _run_alone(self, conn: sqlite3.Connection, job: _Job) -> tuple[bool, Any]:
        try:
            conn.execute("BEGIN IMMEDIATE")
            result = job.fn(conn)
            conn.execute("COMMIT")
            self.commits += 1
            return (True, result)
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return (False, exc)

    @staticmethod
    def _deliver(batch: list[_Job], outcomes: list[tuple[bool, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for job, (ok, value) in zip(batch, outcomes, strict=True):
            if job.loop is None:
                cfut = job.future
                assert isinstance(cfut, concurrent.futures.Future)
                if ok:
                    cfut.set_result(value)
                else:
                    cfut.set_exception(value)
            else:
                afut = job.future
                assert isinstance(afut, asyncio.Future)
                by_loop.setdefault(job.loop, []).append((afut, ok, value))
        for loop, items in by_loop.items():
            # A loop closed while we committed has nobody waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve_all, items)

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
        if self._closed:
            return
        self._closed = True
        self._jobs.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
        with self._readers_lock:
            for conn in self._readers:
                with contextlib.suppress(sqlite3.ProgrammingError):
                    conn.close()
            self._readers.clear()


def _resolve_all(items: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for fut, ok, value in items:
        if fut.done():  # the caller was cancelled; its work is committed all the same
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
