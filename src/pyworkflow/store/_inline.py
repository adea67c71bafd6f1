"""Writes run on the caller's own thread, on SQLite (``inline=True``): the part of
:class:`~pyworkflow.store._group_commit.GroupCommitWriter` that spares the writer thread, in
two forms.

**An inline write.** A caller with nobody to share its commit with (the writer idle, no caller's
job queued, at most :data:`INLINE_MAX_READY` other callbacks ready on its loop: one run at a
time) runs its job on its own thread, with the deferred jobs queued before it, in one
transaction (:meth:`InlineWrites._write_inline`).

**A wave.** Many callers on one event loop (all at once) each add their job to the loop's wave
(:meth:`InlineWrites._join_wave`); the first schedules the wave's flush as the loop's next
callback, so every job made in that pass of the loop joins it, and the flush commits them on the
loop, at most :data:`~pyworkflow.store._jobs.MAX_GROUP` a transaction, and releases their
callers at once (:meth:`InlineWrites._flush_wave`). Handed to the writer thread instead, each of
the writer's statements gave up the GIL while SQLite worked and then waited for the loop, which
held it until it waited or the interpreter's switch interval (5 ms) ran out: the two threads
took turns rather than working at once, and every job crossed threads twice. A deferred write
made on the loop while its wave is open joins the wave, after the jobs already in it.

Either way the event loop is held for the transaction (its statements and the flush). It never
waits for another process: when another process holds the file's write lock (past
:data:`INLINE_BUSY_MS`), the jobs go to the writer thread, which waits as usual, and so do the
writes of the next :data:`WAVE_BACKOFF` seconds. A wave whose writer thread has the connection
(a write from another thread, a deferred job committed alone) waits for it up to
:data:`WAVE_PATIENCE`, gathering more jobs, then hands its jobs to the thread. A batch in which
one job fails re-runs each job alone, as the writer does; callers cancelled meanwhile get the
same ``abandoned`` hand-over. When the database closes, the writer thread commits a wave not yet
flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from ._jobs import _PENDING, MAX_GROUP, Job, _deliver, _settle
from ._metrics import GROUP_COMMITS

#: Milliseconds an inline write waits for another process's write lock before it hands its jobs
#: to the writer thread (which waits up to the write timeout).
INLINE_BUSY_MS = 1
#: Callbacks other than the caller's that may be ready on its event loop for a write to run
#: inline: the ends of the turn before (a task's done callback, a waiter woken) are not writers
#: that would share the commit; at most this many could, and they then share the next one.
INLINE_MAX_READY = 2
_MANY = range(INLINE_MAX_READY + 1)  # a loop that does not show what is ready (uvloop): never
#: Seconds writes go to the writer thread, not in waves, after another process held the write
#: lock when a wave (or an inline write) began: the thread waits for the lock, not the loop.
WAVE_BACKOFF = 0.1
#: Whether writes on an event loop gather into waves (False: they go to the writer thread, unless
#: one runs inline; tests of the thread's own path turn it off).
WAVES = True
#: Seconds a wave waits for the writer thread to finish its batch (looking again every
#: :data:`WAVE_RETRY` seconds, gathering more jobs) before it hands its jobs to the thread.
WAVE_PATIENCE = 0.05
WAVE_RETRY = 0.0005


class _Waves:
    """The wave of writes an event loop (``loop``) is gathering (``jobs``), the waves committed
    (``commits``), and until when (``time.monotonic()``) writes go to the writer thread instead
    because another process held the write lock (``contended_until``)."""

    __slots__ = ("commits", "contended_until", "jobs", "loop", "since", "thread")

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        #: the loop's thread, and when the wave began (``time.monotonic()``)
        self.thread: int | None = None
        self.since = 0.0
        self.contended_until = 0.0
        self.commits = 0


def _release(jobs: list[Job]) -> None:
    """Release the callers of a wave's ``jobs``, on their loop (this one): each caller's future
    settled at once, a deferred job's callback called."""
    mine = [job for job in jobs if job.loop is not None]
    if len(mine) < len(jobs):
        _deliver([job for job in jobs if job.loop is None])
    _settle(mine)


class InlineWrites:
    """The inline writes and waves of :class:`~pyworkflow.store._group_commit.GroupCommitWriter`
    (its base: the queue, its lock and the writer's state are the writer's)."""

    if TYPE_CHECKING:
        _mutex: threading.Lock
        _cv: threading.Condition
        _queue: list[Job]
        _busy: bool
        _holder: int | None
        _urgent: int
        _closing: bool
        _deferred_at: float
        _slots: list[Any]
        _waves: _Waves
        inline_commits: int

        def _connection(self, slot: Any) -> Any: ...
        def _bound_wait(self, conn: Any, seconds: float) -> None: ...
        def _begin(self, conn: Any) -> None: ...
        def _rollback(self, conn: Any) -> None: ...
        def _functions(self, slot: Any, jobs: list[Job], *, begun: bool = False) -> None: ...
        @staticmethod
        def _timed_out() -> BaseException: ...

    @property
    def wave_commits(self) -> int:
        """Transactions committed as a wave on an event loop (see :meth:`write`)."""
        return self._waves.commits

    def _write_inline(self, job: Job) -> bool:
        """Run ``job`` (and the deferred jobs queued before it) on this thread if the writer is
        idle and no caller's job is queued; False if it did not run (the caller queues it)."""
        taken = self._run_here([job])
        if taken is None:
            return False
        self.inline_commits += 1
        _deliver(taken)
        return True

    def _run_here(self, jobs: list[Job]) -> list[Job] | None:
        """Run ``jobs``, after the deferred jobs queued before them, in one transaction on this
        thread, if the writer is idle and no caller's job is queued; the deferred jobs it took
        (their callers not released yet), or None if nothing ran (``jobs`` are not queued)."""
        with self._mutex:
            if self._busy or self._urgent or self._closing or self._contended():
                return None
            room = max(0, MAX_GROUP - len(jobs))
            taken = self._queue[:room]
            del self._queue[:room]
            self._busy = True
            self._holder = threading.get_ident()
        ran = False
        started = time.perf_counter()
        try:
            ran = self._functions_inline(self._slots[0], taken + jobs if taken else jobs)
        finally:
            with self._mutex:
                self._busy = False
                self._holder = None
                if not ran:  # back to the front of the queue, in order, for the writer
                    self._queue[:0] = taken
                    if len(self._queue) == len(taken) and self._queue:
                        self._deferred_at = time.monotonic()
                    # another process holds the write lock: the writer thread waits for it,
                    # not this loop, for a while
                    self._waves.contended_until = time.monotonic() + WAVE_BACKOFF
                if self._queue or self._closing:
                    self._cv.notify()
        if not ran:
            return None
        GROUP_COMMITS.observe(time.perf_counter() - started, len(jobs) + len(taken))
        return taken

    # -- waves: the writes of one pass of an event loop, committed on the loop

    def _contended(self) -> bool:
        """Whether another process held the write lock within the last :data:`WAVE_BACKOFF`
        seconds (called with the queue's lock held)."""
        until = self._waves.contended_until
        if not until:
            return False
        if time.monotonic() < until:
            return True
        self._waves.contended_until = 0.0
        return False

    def _join_wave(self, job: Job, loop: asyncio.AbstractEventLoop | None) -> bool:
        """Add ``job`` to the wave of ``loop`` (starting one, flushed when the loop next gets to
        it; ``loop`` None: a deferred job, which joins only a wave open on this thread); False
        when it must be queued for the writer thread instead."""
        waves = self._waves
        with self._mutex:
            if self._closing:
                raise RuntimeError("database is closed")
            wave = waves.jobs
            if wave:
                if loop is None:
                    if waves.thread != threading.get_ident():
                        return False
                elif waves.loop is not loop:
                    return False
                wave.append(job)
                return True
            if loop is None or self._contended():
                return False
            waves.loop = loop
            waves.thread = threading.get_ident()
            waves.since = time.monotonic()
            wave.append(job)
        loop.call_soon(self._flush_wave)
        return True

    def _flush_wave(self) -> None:
        """Commit the wave on its loop, its callers released at once; while the writer thread
        has the connection, wait for it (up to :data:`WAVE_PATIENCE`, gathering more jobs), then
        hand the wave to it; when another process holds the write lock, hand it over at once."""
        waves = self._waves
        with self._mutex:
            jobs, loop = waves.jobs, waves.loop
            if not jobs or loop is None:  # closed meanwhile: the writer thread took the jobs
                return
            if (self._busy or self._urgent) and time.monotonic() - waves.since < WAVE_PATIENCE:
                retry = True
            else:
                retry = False
                waves.jobs, waves.loop, waves.thread = [], None, None
        if retry:
            loop.call_later(WAVE_RETRY, self._flush_wave)
            return
        now = time.monotonic()
        late = [job for job in jobs if job.deadline <= now]
        if late:
            for job in late:
                job.error = self._timed_out()
            _release(late)
            jobs = [job for job in jobs if job.deadline > now]
            if not jobs:
                return
        for first in range(0, len(jobs), MAX_GROUP):  # a transaction at most MAX_GROUP jobs
            chunk = jobs[first : first + MAX_GROUP]
            try:
                taken = self._run_here(chunk)
            except BaseException as exc:  # never leave a caller waiting
                for job in jobs[first:]:
                    if job.error is None and job.value is _PENDING:
                        job.error = exc
                _release(jobs[first:])
                raise
            if taken is None:
                self._to_writer(jobs[first:])
                return
            waves.commits += 1
            _deliver(taken)
            _release(chunk)

    def _functions_inline(self, slot: Any, jobs: list[Job]) -> bool:
        """:meth:`_functions` on the caller's thread, beginning without waiting for another
        process's write lock: False, with nothing run, when the transaction could not begin."""
        try:
            conn = self._connection(slot)
            self._bound_wait(conn, INLINE_BUSY_MS / 1000)
            self._begin(conn)
        except Exception:
            # Not begun (the lock is held, the file is gone, the connection failed): the writer
            # thread runs these jobs as usual and gives each caller its outcome.
            with contextlib.suppress(Exception):
                if slot.conn is not None:
                    self._rollback(slot.conn)
            return False
        self._functions(slot, jobs, begun=True)
        return True

    def _to_writer(self, jobs: list[Job]) -> None:
        """Queue a wave's ``jobs`` for the writer thread, in order (failed at once if the
        database closed meanwhile)."""
        with self._mutex:
            if not self._closing:
                self._queue.extend(jobs)
                self._urgent += sum(1 for job in jobs if not job.deferred)
                self._cv.notify()
                return
        closed = RuntimeError("database is closed")
        for job in jobs:
            job.error = closed
        _release(jobs)
