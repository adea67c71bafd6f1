"""Group commit: one writer thread runs the write transactions of many concurrent callers and
commits them together, releasing each caller only after the commit that holds its work.

A commit is a disk flush (SQLite's WAL fsync, PostgreSQL's WAL flush); committing the pending
transitions of every concurrent caller in one transaction makes the flushes per transition fall
below one. The database classes built on it (:class:`~pyworkflow.store._sqlite_db.SQLiteDatabase`,
atfgraph's PostgreSQL database) supply the connection and how to begin, commit and roll back.

A write function may be run twice: when one job of a batch raises, the batch is rolled back and
each job is re-run alone in its own transaction, so only the failing one sees its error. A write
function therefore touches nothing but the connection it is given.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
C = TypeVar("C")

_MAX_BATCH = 512
#: Runs of a job that failed alone with a transient error (see ``_transient``).
_TRANSIENT_RETRIES = 3
_STOP = object()


@dataclass(slots=True)
class _Job:
    fn: Callable[[Any], Any]
    loop: asyncio.AbstractEventLoop | None
    future: asyncio.Future[Any] | concurrent.futures.Future[Any]


class GroupCommitWriter(Generic[C]):
    """The writer thread and its job queue. Subclasses implement the four connection hooks and
    call :meth:`_start_writer` once their connection is ready."""

    commits: int
    _closed: bool

    # -- the hooks a database supplies ------------------------------------------------------------

    def _writer_connection(self) -> C:
        """The connection the writer uses for the next batch (may reconnect)."""
        raise NotImplementedError

    def _begin(self, conn: C) -> None:
        raise NotImplementedError

    def _commit(self, conn: C) -> None:
        raise NotImplementedError

    def _rollback(self, conn: C) -> None:
        """Roll back whatever transaction is open (none may be)."""
        raise NotImplementedError

    def _close_writer(self) -> None:
        raise NotImplementedError

    def reader(self) -> C:
        """This thread's read connection (each statement sees the latest commit)."""
        raise NotImplementedError

    def read(self, fn: Callable[[C], T]) -> T:
        """Run ``fn`` against this thread's reader in one consistent snapshot."""
        raise NotImplementedError

    def close(self) -> None:
        """Finish the queued writes, stop the writer and close every connection."""
        raise NotImplementedError

    def _transient(self, exc: BaseException) -> bool:
        """Whether a job that failed with ``exc`` alone may succeed if run again (a lost deadlock
        or serialization race between processes sharing the database)."""
        return False

    # -- the writer -------------------------------------------------------------------------------

    def _start_writer(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._closed = False
        self.commits = 0  # transactions committed by the writer; read by benchmarks
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    async def write(self, fn: Callable[[C], T]) -> T:
        """Run ``fn`` in a write transaction; return once it is committed (durable)."""
        if self._closed:
            raise RuntimeError("database is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(fn, loop, fut))
        return await fut

    def write_sync(self, fn: Callable[[C], T]) -> T:
        """Blocking form of :meth:`write`, for code that has no event loop."""
        if self._closed:
            raise RuntimeError("database is closed")
        if threading.current_thread() is self._thread:
            raise RuntimeError("write_sync called from the writer thread")
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put(_Job(fn, None, fut))
        return fut.result()

    def _run(self) -> None:
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
            try:
                conn = self._writer_connection()
            except BaseException as exc:  # the database is unreachable: every job gets the error
                self._deliver(batch, [(False, exc)] * len(batch))
            else:
                self._deliver(batch, self._commit_batch(conn, batch))
            if stop:
                break
        self._close_writer()

    def _commit_batch(self, conn: C, batch: list[_Job]) -> list[tuple[bool, Any]]:
        """Commit the whole batch at once; if any job raises, run each job alone so that only the
        failing one sees its error and the others still commit."""
        try:
            self._begin(conn)
            results = [(True, job.fn(conn)) for job in batch]
            self._commit(conn)
            self.commits += 1
            return results
        except BaseException:
            self._rollback(conn)
            if len(batch) == 1:
                return [self._run_alone(conn, batch[0])]
        return [self._run_alone(conn, job) for job in batch]

    def _run_alone(self, conn: C, job: _Job) -> tuple[bool, Any]:
        for attempt in range(1, _TRANSIENT_RETRIES + 1):
            try:
                self._begin(conn)
                result = job.fn(conn)
                self._commit(conn)
                self.commits += 1
                return (True, result)
            except BaseException as exc:
                self._rollback(conn)
                if attempt == _TRANSIENT_RETRIES or not self._transient(exc):
                    return (False, exc)
        raise AssertionError("unreachable")

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

    def _stop_writer(self) -> None:
        """Let the queued jobs finish, then stop the writer (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)


def _resolve_all(items: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for fut, ok, value in items:
        if fut.done():  # the caller was cancelled; its work is committed all the same
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
