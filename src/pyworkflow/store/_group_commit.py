"""Group commit: writer threads run the write transactions of many concurrent callers and commit
them together, releasing each caller only after the commit that holds its work.

A commit is a disk flush (SQLite's WAL fsync, PostgreSQL's WAL flush); committing the pending work
of every concurrent caller in one transaction makes the flushes per transition fall below one.
The database classes built on :class:`GroupCommitWriter` (:class:`~pyworkflow.store.SQLiteDatabase`,
:class:`~pyworkflow.store.PostgresDatabase`) supply the connections and how to begin, commit and
roll back.

A job is one of two kinds:

- a **function** of the writer's connection (:meth:`GroupCommitWriter.write`): the functions a
  writer takes at once run in one transaction. A function may be run twice: when one of the batch
  raises, the batch is rolled back and each function is re-run alone in its own transaction (a
  transient error, a deadlock or serialization failure, up to three times), so only the failing
  one sees its error. A write function therefore touches nothing but the connection it is given.
- a single **statement** (:meth:`GroupCommitWriter.submit`) with the run it locks as its ``key``:
  the statements a writer takes at once are sorted by key (reads, ``""``, first) and sent in one
  transaction (on PostgreSQL pipelined: ``BEGIN``, the statements, ``COMMIT`` in one round trip),
  so transactions lock runs in one order and never wait on each other in a cycle. A statement
  whose key is ``None`` (it may lock several runs in any order) runs alone, in a transaction of
  its own. A statement that fails rolls its group back, and each statement is then run again
  alone, so one caller's error is never another's.

**Deferred writes.** A write function that no caller needs durable at once (the end of a turn
whose promises were kept by an earlier commit; see :meth:`GroupCommitWriter.write_deferred`) is
queued without waking the writer: it joins the next batch that a caller's write starts, so it
costs no commit of its own, or is committed alone :data:`DEFER_LINGER` seconds after it was
queued if no write came. Jobs run in the order they were queued, so it is applied before any
later write, of its run or another's. A deferred job wakes only a writer that sleeps; one that
lingers (a job was deferred within the last :data:`DEFER_LINGER`, even if a caller's write took
it since) looks again when its wait ends: one at a time, where each turn's deferred end is taken
by the next caller's inline write, the writer thread wakes once a linger, not once a turn (each
wake-up a thread switch and a hand-off of the GIL; ``wakeups`` counts them).

**Carried statements.** A statement may carry others of the same run that no caller waits for
(:meth:`GroupCommitWriter.submit` with ``carried``: a turn's deferred writes, see
``store/_pg_carry.py``): they run just before it, in its transaction, on its writer, so they
cost no commit of their own and are never applied after it, whatever the number of writers. A
deferred statement may also be queued (:meth:`GroupCommitWriter.submit_deferred`), to join the
next batch of any caller; while it is still queued, :meth:`GroupCommitWriter.take_back` takes it
out again for a later statement of its run to carry.

**Inline writes and waves** (SQLite's single writer, ``inline=True`` to
:meth:`GroupCommitWriter._start_writer`): a caller with nobody to share its commit with runs its
job on its own thread, and the jobs that callers on one event loop make in one pass of the loop
are committed together on the loop (a *wave*), rather than crossing to the writer thread and back
(``store/_inline.py``).

Either way, a connection lost in the middle fails the callers of the work in flight (whether it
committed is unknown, as for any call), and the writer reconnects for the next. A free writer
takes every job submitted since a writer last looked (up to :data:`MAX_GROUP`); with several
writers one executes while another commits. Callers are released after the commit (or the
rollback), each on its own event loop, one wake-up per loop and batch.

**The write timeout.** A caller waits a bounded time for the database: a job carries a deadline
(``write_timeout`` seconds after it was submitted, :data:`WRITE_TIMEOUT` by default), and a job
still unstarted at its deadline fails with :class:`~pyworkflow.DatabaseUnavailableError` without
running. A database whose write lock another process holds (SQLite) waits at most until the
batch's earliest deadline (:meth:`GroupCommitWriter._bound_wait`); a failure that means the
database took no write at all (:meth:`GroupCommitWriter._unavailable`: SQLite busy, its file
deleted or replaced) fails the whole batch with that error at once, rather than running each job
alone and waiting again. Nothing of such a job ran, so the caller may retry it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .._errors import DatabaseUnavailableError
from ._inline import _MANY, INLINE_MAX_READY, WAVES, InlineWrites, _Waves
from ._jobs import (
    _NEVER,
    _PENDING,
    MAX_GROUP,
    Job,
    Rows,
    Then,
    _by_key,
    _deliver,
    _Then,
    _unpack,
)
from ._metrics import GROUP_COMMITS

T = TypeVar("T")
C = TypeVar("C")

log = logging.getLogger("pyworkflow.store.group_commit")

#: Seconds a deferred write waits for a caller's write to join before it is committed alone.
#: One run at a time, the next run's first write comes well within this (about 0.1-1 ms later).
DEFER_LINGER = 0.01
#: Seconds a write may wait for the database by default (the graph server's ``--write-timeout``).
WRITE_TIMEOUT = 10.0
#: Runs of a write function that failed alone with a transient error (see ``_transient``).
_TRANSIENT_RETRIES = 3


class _Slot(Generic[C]):
    """One writer thread's connection (None until its first job, and after it was closed)."""

    __slots__ = ("conn",)

    def __init__(self, conn: C | None) -> None:
        self.conn = conn


class GroupCommitWriter(InlineWrites, Generic[C]):
    """The writer threads and their job queue: the base of both database classes. Subclasses
    implement the connection hooks and call :meth:`_start_writer` once their connection is ready.
    ``commits`` counts the transactions of write functions committed; ``groups`` and
    ``statements`` the statement groups sent and the statements in them, ``wakeups`` the writer
    threads' wake-ups (benchmarks read them).
    ``write_timeout``: seconds a job may wait for the database (None: no bound)."""

    commits: int
    wakeups: int
    groups: int
    statements: int
    write_timeout: float | None

    # -- the hooks a database supplies ------------------------------------------------------------

    def _connect_writer(self, lost: C | None) -> C:
        """A new connection for a writer that has none (``lost``: the one that went away)."""
        raise NotImplementedError

    def _usable(self, conn: C) -> bool:
        """Whether the writer may run its next job on ``conn`` (False: reconnect)."""
        return True

    def _lost(self, conn: C) -> bool:
        """Whether ``conn`` went away during the work that just failed."""
        return False

    def _begin(self, conn: C) -> None:
        raise NotImplementedError

    def _commit(self, conn: C) -> None:
        raise NotImplementedError

    def _rollback(self, conn: C) -> None:
        """Roll back whatever transaction is open (none may be)."""
        raise NotImplementedError

    def _close_connection(self, conn: C) -> None:
        raise NotImplementedError

    def _unavailable(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the database took no write at all (it stayed locked, its file is
        gone): the batch fails with :class:`DatabaseUnavailableError` instead of each job being
        run alone. :class:`DatabaseUnavailableError` itself always is."""
        return isinstance(exc, DatabaseUnavailableError)

    def _bound_wait(self, conn: C, seconds: float) -> None:
        """Wait at most ``seconds`` for the database's write lock in the next transaction on
        ``conn`` (SQLite's busy timeout; PostgreSQL's lock timeout is set once per connection)."""

    def _transient(self, exc: BaseException) -> bool:
        """Whether a function that failed with ``exc`` alone may succeed if run again (a lost
        deadlock or serialization race between processes sharing the database)."""
        return False

    def _send_group(self, conn: C, jobs: list[Job]) -> None:
        """Run the statements ``jobs`` in one transaction and set each one's ``value`` to its rows,
        or raise (the caller rolls back). PostgreSQL overrides this with one pipelined round trip."""
        self._begin(conn)
        values = [self._send_one(conn, job) for job in jobs]
        self._commit(conn)
        for job, value in zip(jobs, values, strict=True):
            job.value = value

    def _send_one(self, conn: C, job: Job) -> Rows:
        """Run one statement in a transaction of its own (autocommit); its rows."""
        rows: Rows = conn.execute(job.sql, job.params).fetchall()  # type: ignore[attr-defined]
        return rows

    def reader(self) -> C:
        """This thread's read connection (each statement sees the latest commit)."""
        raise NotImplementedError

    def read(self, fn: Callable[[C], T]) -> T:
        """Run ``fn`` against this thread's reader in one consistent snapshot."""
        raise NotImplementedError

    def close(self) -> None:
        """Finish the queued writes, stop the writers and close every connection."""
        raise NotImplementedError

    # -- submitting -------------------------------------------------------------------------------

    def _start_writer(
        self,
        name: str,
        *,
        conn: C | None = None,
        writers: int = 1,
        write_timeout: float | None = WRITE_TIMEOUT,
        inline: bool = False,
    ) -> None:
        """Start ``writers`` threads; the first one starts with ``conn``, the others connect when
        they first have work. Jobs wait at most ``write_timeout`` seconds (None: no bound).
        ``inline``: a caller with nobody to share a commit with runs its write on its own thread
        (one writer only; the database's :meth:`_begin` must fail at once, as unavailable, while
        another process holds the write lock after :meth:`_bound_wait` of ``INLINE_BUSY_MS``)."""
        self.write_timeout = check_write_timeout(write_timeout)
        #: the queue's lock, and its condition (taken as ``with self._mutex``: a Condition's own
        #: ``with`` is two Python calls more, each time)
        self._mutex = threading.Lock()
        self._cv = threading.Condition(self._mutex)
        self._queue: list[Job] = []
        #: the writes of one pass of an event loop, committed on it together (one attribute:
        #: an instance with more than 30 makes CPython 3.11 give up its shared-key dict, and
        #: every attribute of the database reads slower)
        self._waves = _Waves()
        #: whether ``write`` may run a job inline, and whether a thread (the writer, or an inline
        #: caller) has the connection now; ``inline_commits`` counts the inline transactions
        self.inline = inline and writers <= 1
        self._busy = False
        self._holder: int | None = None  # the thread running a write inline
        #: writer threads running a batch now (PostgreSQL's inline statements wait for none)
        self._working = 0
        self.inline_commits = 0
        #: how often a writer thread woke from a wait (each costs a thread switch and the GIL)
        self.wakeups = 0
        #: jobs in the queue that a caller waits for (deferred ones are the rest), and when the
        #: oldest deferred job still queued was queued
        self._urgent = 0
        self._deferred_at = 0.0
        #: writer threads waiting without a bound (a lingering one wakes by itself)
        self._sleeping = 0
        self._closing = False
        self.commits = 0
        self.groups = 0
        self.statements = 0
        count = max(1, writers)
        self._slots = [_Slot(conn if k == 0 else None) for k in range(count)]
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(self._slots[k],),
                name=name if count == 1 else f"{name}-{k}",
                daemon=True,
            )
            for k in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _put(self, job: Job) -> None:
        with self._mutex:
            if self._closing:
                raise RuntimeError("database is closed")
            self._queue.append(job)
            if job.deferred:
                if len(self._queue) == 1:
                    self._deferred_at = time.monotonic()
                    if self._sleeping:
                        self._cv.notify()  # a sleeping writer starts its linger
                    # else a lingering writer finds it when its wait ends (one wake-up, not one
                    # a job, while callers' inline writes keep taking the deferred jobs)
                return
            self._urgent += 1
            if self._urgent == 1:
                self._cv.notify()

    def _deadline(self, timeout: float | None) -> float:
        bound = self.write_timeout if timeout is None else timeout
        return _NEVER if bound is None else time.monotonic() + bound

    async def write(
        self,
        fn: Callable[[C], T],
        *,
        timeout: float | None = None,
        abandoned: Callable[[T], None] | None = None,
    ) -> T:
        """Run ``fn`` in a write transaction; return once it is committed (durable).
        :class:`DatabaseUnavailableError` if the database took no write within ``timeout``
        seconds (default: :attr:`write_timeout`); then ``fn`` did not commit.

        A caller cancelled while its job is in flight stops waiting, but the job commits all the
        same: ``abandoned(value)`` is then called on the caller's loop, for what the caller would
        have done with the value that must not be lost (a lease it took: a turn to run)."""
        loop = asyncio.get_running_loop()
        if self.inline and not self._waves.jobs and len(getattr(loop, "_ready", _MANY)) <= INLINE_MAX_READY:
            # Next to nothing else is ready on this loop: nobody would share the commit.
            job = Job(fn, None, None, None, None, None, self._deadline(timeout))
            if self._write_inline(job):
                if job.error is not None:
                    raise job.error
                value: T = job.value
                return value
        future: asyncio.Future[T] = loop.create_future()
        job = Job(fn, None, None, None, loop, future, self._deadline(timeout))
        job.abandoned = abandoned
        if not (self.inline and WAVES and self._join_wave(job, loop)):
            self._put(job)
        return await future

    def write_deferred(self, fn: Callable[[C], Any], then: Callable[[BaseException | None], None]) -> None:
        """Queue ``fn`` to run in the transaction of the next caller's write (or alone after
        :data:`DEFER_LINGER` seconds) and return at once: nobody waits for it, so it must be
        work whose loss in a crash the engine's recovery makes good (a lease left to expire).
        ``then(error)`` runs on the writer thread once it committed (``None``) or failed. Jobs
        keep their order on one writer; with several writers this is :meth:`write` unawaited
        in order, committed at once."""
        job = Job(fn, None, None, None, None, _Then(then))
        job.deferred = len(self._threads) == 1
        if not (self.inline and self._waves.jobs and self._join_wave(job, None)):
            self._put(job)

    def write_sync(self, fn: Callable[[C], T], *, timeout: float | None = None) -> T:
        """Blocking form of :meth:`write`, for code that has no event loop."""
        if threading.current_thread() in self._threads or self._holder == threading.get_ident():
            raise RuntimeError("write_sync called from the writer thread (or a write running inline)")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._put(Job(fn, None, None, None, None, future, self._deadline(timeout)))
        return future.result()

    async def check_writable(self, timeout: float | None = None) -> None:
        """Commit an empty write transaction through the writer: return once the database took
        it, or raise (:class:`DatabaseUnavailableError` after ``timeout`` seconds, default
        :attr:`write_timeout`). What a readiness probe asks."""
        await self.write(_nothing, timeout=timeout)

    def statement(self, sql: str, params: Any, key: str | None, then: Then) -> Job:
        """A statement nobody waits for, not sent yet: for :meth:`submit`'s ``carried`` or
        :meth:`submit_deferred`. ``then(rows, error)`` runs on the writer thread when its
        transaction ended."""

        def done(future: concurrent.futures.Future[Rows]) -> None:
            error = future.exception()
            then(None if error else future.result(), error)

        future: concurrent.futures.Future[Rows] = concurrent.futures.Future()
        future.add_done_callback(done)
        return Job(None, sql, params, key, None, future, _NEVER)

    def submit_deferred(self, job: Job) -> None:
        """Queue ``job`` (:meth:`statement`) to run in the next batch a caller's write starts,
        or alone :data:`DEFER_LINGER` seconds after it was queued: it costs no commit of its
        own. With several writers it may run after a later statement of its key that another
        writer took: the statement must be one whose fence makes that harmless, or a later
        statement of its key must carry it (:meth:`take_back`) or wait for it."""
        job.deferred = True
        self._put(job)

    def take_back(self, job: Job) -> bool:
        """Take a deferred ``job`` out of the queue before a writer took it (True): the caller
        then carries it with a statement of its own. False: a writer has it already."""
        with self._mutex:
            try:
                self._queue.remove(job)
            except ValueError:
                return False
            return True

    def submit(
        self,
        sql: str,
        params: Any,
        key: str | None = "",
        *,
        carried: Sequence[Job] = (),
        abandoned: Callable[[Rows], None] | None = None,
    ) -> asyncio.Future[Rows]:
        """Hand one statement to the writers (``key``: the run it locks, ``""`` for a read,
        :data:`LOCKS_LAST` for one that finds its run itself, ``None`` to run alone); the
        future, on the running loop, settles with its rows after its transaction ended. A
        caller that stops waiting does not stop the statement: ``abandoned(rows)`` is then called
        on its loop once the statement committed (see :meth:`write`). ``sql`` is the kit's SQL, as a
        write function's: ``?`` placeholders with a sequence of ``params``,
        ``:name`` with a dict (PostgreSQL's database translates it for psycopg).

        ``carried``: statements of the same ``key`` that nobody waits for, each a
        :meth:`statement`; they run in order just before this one, in its
        transaction (alone, in order, on its writer, if the group is re-run statement by
        statement), and ``then(rows, error)`` runs on the writer thread when each one's
        transaction ended."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Rows] = loop.create_future()
        job = Job(None, sql, params, key, loop, future, self._deadline(None))
        if carried:
            job.carried = list(carried)
        job.abandoned = abandoned
        self._put(job)
        return future

    def _stop_writer(self, timeout: float = 30.0) -> None:
        """Let the queued jobs finish, then stop the writers (idempotent)."""
        with self._mutex:
            if self._closing:
                return
            self._closing = True
            # a wave not flushed yet: the writer thread commits it (its callers are released on
            # their loop as any queued job's)
            waves = self._waves
            self._queue.extend(waves.jobs)
            self._urgent += sum(1 for job in waves.jobs if not job.deferred)
            waves.jobs, waves.loop, waves.thread = [], None, None
            self._cv.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # -- the writers ------------------------------------------------------------------------------

    def _run(self, slot: _Slot[C]) -> None:
        cv, mutex, queue = self._cv, self._mutex, self._queue
        try:
            while True:
                with mutex:
                    while self._busy or (not self._urgent and not self._closing):
                        linger = self._deferred_at + DEFER_LINGER - time.monotonic()
                        if linger > 0:
                            # A job was deferred lately: wait a while for a caller's write to
                            # take it. Also once callers' inline writes took it, or while one
                            # has the connection: a stream of deferred jobs (one at a time) then
                            # wakes the writer once a linger, not once a job, since a deferred
                            # job wakes only a writer that sleeps.
                            cv.wait(linger)
                        elif self._busy or not queue:
                            # Nothing deferred lately, or an inline caller has the connection:
                            # sleep until a job, or the inline caller's end, wakes it.
                            self._sleeping += 1
                            try:
                                cv.wait()
                            finally:
                                self._sleeping -= 1
                        else:
                            break  # the linger is over: commit the deferred jobs alone
                        self.wakeups += 1
                    if not queue:
                        return
                    jobs = queue[:MAX_GROUP]
                    del queue[:MAX_GROUP]
                    held = self._hold_for_a_write(jobs)
                    if held:
                        jobs = [job for job in jobs if not job.deferred]
                    if queue:  # more than one batch's worth: let another writer start
                        self._urgent = sum(1 for job in queue if not job.deferred)
                        self._deferred_at = time.monotonic()
                        cv.notify()
                    else:
                        self._urgent = 0
                    if held:
                        queue[:0] = held
                    self._busy = self.inline
                    self._working += 1
                jobs = _unpack(jobs)
                started = time.perf_counter()
                try:
                    self._execute(slot, jobs)
                except BaseException as exc:  # never leave a caller waiting
                    for job in jobs:
                        if job.error is None and job.value is _PENDING:
                            job.error = exc
                    if not isinstance(exc, Exception):
                        raise
                    log.exception("group commit failed")
                finally:
                    with mutex:
                        self._busy = False
                        self._working -= 1
                    _deliver(jobs)
                    # Once per batch, after its callers were released: its size and time, one lock.
                    GROUP_COMMITS.observe(time.perf_counter() - started, len(jobs))
        finally:
            if slot.conn is not None:
                with contextlib.suppress(Exception):
                    self._close_connection(slot.conn)
                slot.conn = None

    def _hold_for_a_write(self, jobs: list[Job]) -> list[Job]:
        """The deferred jobs of a batch that should wait on for a caller's write: a batch of
        reads alone (PostgreSQL's store reads through the writer) commits nothing it need not,
        until the deferred jobs' linger is over. (Called with the lock held.)"""
        if self._closing or self._deferred_at + DEFER_LINGER <= time.monotonic():
            return []
        held = [job for job in jobs if job.deferred]
        if not held or len(held) == len(jobs):
            return []
        if any(job.fn is not None or job.key != "" for job in jobs if not job.deferred):
            return []
        return held

    def _connection(self, slot: _Slot[C]) -> C:
        conn = slot.conn
        if conn is None or not self._usable(conn):
            slot.conn = conn = self._connect_writer(conn)
        return conn

    def _execute(self, slot: _Slot[C], jobs: list[Job]) -> None:
        group: list[Job] = []
        alone: list[Job] = []
        functions: list[Job] = []
        now = time.monotonic()
        for job in jobs:
            if job.deadline <= now:
                job.error = self._timed_out()
            elif job.fn is not None:
                functions.append(job)
            elif job.key is None:
                alone.append(job)
            else:
                group.append(job)
        if len(group) > 1:
            group.sort(key=_by_key)
            self._group(slot, group)
        elif group:
            self._alone(slot, group[0])
        if functions:
            self._functions(slot, functions)
        for job in alone:
            self._alone(slot, job)

    # -- the write timeout

    @staticmethod
    def _timed_out() -> DatabaseUnavailableError:
        return DatabaseUnavailableError(
            "the database did not take this write within the write timeout; nothing was written, retry later"
        )

    def _wait_bound(self, conn: C, jobs: list[Job]) -> None:
        """Let the next transaction on ``conn`` wait for the database until the earliest
        deadline of ``jobs``."""
        deadline = min(job.deadline for job in jobs)
        # No deadline (deferred jobs): the database's longest wait (an inline write may have
        # left a short one on the connection).
        self._bound_wait(conn, _NEVER if deadline == _NEVER else max(0.0, deadline - time.monotonic()))

    def _as_unavailable(self, exc: BaseException) -> BaseException:
        """``exc`` as the callers see it: :class:`DatabaseUnavailableError` when the database
        took no write (:meth:`_unavailable`), else ``exc`` itself."""
        if isinstance(exc, DatabaseUnavailableError) or not self._unavailable(exc):
            return exc
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        error = DatabaseUnavailableError(f"the database cannot take writes now: {reason}")
        error.__cause__ = exc
        return error

    # -- statements

    def _group(self, slot: _Slot[C], jobs: list[Job]) -> None:
        try:
            conn = self._connection(slot)
        except Exception as exc:
            for job in jobs:
                job.error = exc
            return
        with self._mutex:
            self.groups += 1
            self.statements += len(jobs)
        try:
            self._wait_bound(conn, jobs)
            self._send_group(conn, jobs)
        except Exception as exc:
            self._rollback(conn)
            if self._lost(conn) or self._unavailable(exc):
                error = self._as_unavailable(exc)
                for job in jobs:
                    job.value, job.error = _PENDING, error
                return
            for job in jobs:  # one statement rolled the group back: each alone, its own outcome
                job.value = _PENDING
                self._alone(slot, job)

    def _alone(self, slot: _Slot[C], job: Job) -> None:
        if job.deadline <= time.monotonic():
            job.error = self._timed_out()
            return
        try:
            conn = self._connection(slot)
            self._wait_bound(conn, [job])
            job.value = self._send_one(conn, job)
        except Exception as exc:
            job.error = self._as_unavailable(exc)

    # -- write functions

    def _functions(self, slot: _Slot[C], jobs: list[Job], *, begun: bool = False) -> None:
        """Run write functions in one transaction (``begun``: already open on ``slot``)."""
        try:
            conn = self._connection(slot)
        except BaseException as exc:  # the database is unreachable: every job gets the error
            for job in jobs:
                job.error = exc
            return
        try:
            if not begun:
                self._wait_bound(conn, jobs)
                self._begin(conn)
            for job in jobs:
                job.value = job.fn(conn)  # type: ignore[misc]
            self._commit(conn)
            self._count_commit()
            return
        except BaseException as exc:
            self._rollback(conn)
            if self._lost(conn) or self._unavailable(exc):
                error = self._as_unavailable(exc)
                for job in jobs:
                    job.value, job.error = _PENDING, error
                return
            if len(jobs) == 1 and not self._transient(exc):  # it ran alone: the error is its own
                jobs[0].value, jobs[0].error = _PENDING, exc
                return
        for job in jobs:  # run each alone, so that only the failing one sees its error
            job.value = _PENDING
            self._function_alone(conn, job)

    def _function_alone(self, conn: C, job: Job) -> None:
        for attempt in range(1, _TRANSIENT_RETRIES + 1):
            now = time.monotonic()
            if job.deadline <= now:
                job.error = self._timed_out()
                return
            try:
                self._wait_bound(conn, [job])
                self._begin(conn)
                value = job.fn(conn)  # type: ignore[misc]
                self._commit(conn)
                self._count_commit()
                job.value = value
                return
            except BaseException as exc:
                self._rollback(conn)
                if attempt == _TRANSIENT_RETRIES or not self._transient(exc):
                    job.error = self._as_unavailable(exc)
                    return

    def _count_commit(self) -> None:
        with self._mutex:
            self.commits += 1


def check_write_timeout(value: float | None) -> float | None:
    """``value`` if it is a write timeout (a positive number of seconds, or None), else ValueError."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf")
    ):
        raise ValueError(f"write_timeout must be a positive number of seconds, not {value!r}")
    return value


def _nothing(conn: Any) -> None:
    """The empty write transaction of :meth:`GroupCommitWriter.check_writable`."""
