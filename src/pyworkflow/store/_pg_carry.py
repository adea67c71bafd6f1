"""A PostgreSQL store's deferred turn statements: what a turn writes without waiting (a checkpoint
deletion, the end of a suspended turn), kept per run until the run's next statement carries it
into its own transaction, just before it.

The store has two writers, so a deferred statement cannot simply join the writer's next batch as
on SQLite: another writer could then send the run's next statement first. Here a run's next
statement takes its deferred ones along (``GroupCommitWriter.submit(carried=...)``): those not
sent yet, and one that was queued for any caller's next group (``queued``: the end of a suspended
turn, which frees the run's lease and must not wait for the run's next turn) is taken back from
the queue, or waited for when a writer has it already. So a deferred statement is never written
after a later statement of its run.

The end of a suspended turn whose connection was lost on the way (PostgreSQL restarting) is sent
again, a second apart, until it is written or refused (``RESEND_TRIES``): otherwise the run kept
its lease until the lease ran out, its wake-up waiting that long. Sending it twice is harmless:
its fence refuses it once the run's queue row is gone or another turn holds the run, and what it
writes (hooks notified, delivered counts, the row freed or dropped) comes out the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from .._errors import DatabaseUnavailableError
from ._group_commit import GroupCommitWriter
from ._jobs import Job, Rows
from ._pg_tx import _check_outcome
from ._protocol import Fence

log = logging.getLogger("pyworkflow.store.postgres")

#: Runs whose deferred statements a store keeps at most (see :meth:`RunDeferrals.defer`).
MAX_RUNS = 10_000
#: A queued deferred statement whose connection was lost is sent again this many times at most,
#: ``RESEND_SECONDS`` apart (a restart of PostgreSQL takes seconds; the lease, 30 s by default).
RESEND_TRIES = 30
RESEND_SECONDS = 1.0


def _connection_lost(error: BaseException) -> bool:
    """Whether ``error`` may have kept a statement from being written for want of the database
    (a connection lost or refused, PostgreSQL shutting down, no writer could start it)."""
    return isinstance(error, psycopg.OperationalError | DatabaseUnavailableError)


class RunDeferrals:
    """Per run, the deferred statements its next statement carries (true while any are kept)."""

    def __init__(self, writer: GroupCommitWriter[Any]) -> None:
        self._writer = writer
        self.runs: dict[str, list[Job]] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.runs)

    def defer(
        self,
        fence: Fence,
        sql: str,
        params: Any,
        then: Callable[[BaseException | None], None],
        *,
        queued: bool = False,
        carried: Sequence[Job] = (),
        tries: int = 0,
    ) -> None:
        """Write ``sql`` (a fenced turn function returning its outcome) without a caller waiting:
        in the transaction of the run's next statement, just before it, whichever writer takes
        that (``then(error)`` once it ended). ``queued``: also in the next group of any caller
        (or alone after the writer's linger) if the run has no statement sooner, for what must
        not wait for the run's next turn (the end of a suspended turn frees its lease);
        otherwise not written at all if the turn writes nothing more, as if the process died
        before the call, which its fence and the run's recovery make good. ``carried``: the
        run's statements deferred before, written just before this one. A ``queued`` one whose
        connection was lost is sent again (see the module's docstring; ``tries``: the sends so
        far)."""
        run_id = fence.run_id

        def done(rows: Rows | None, error: BaseException | None) -> None:
            if queued:  # written: the run's next statement need not wait for it
                with self._lock:
                    waiting = self.runs.get(run_id)
                    if waiting is not None and job in waiting:
                        waiting.remove(job)
                        if not waiting:
                            del self.runs[run_id]
            if error is None and rows is not None:
                try:
                    _check_outcome(str(rows[0][0]), run_id, fence.epoch, "")
                except Exception as refused:  # the fence's refusal, reported as it
                    error = refused
            if queued and error is not None and tries < RESEND_TRIES and _connection_lost(error):
                log.debug(
                    "run %s: a deferred statement was not written (%s); sending it again", run_id, error
                )
                self.defer(fence, sql, params, then, queued=True, tries=tries + 1)
                return
            then(error)

        job = self._writer.statement(sql, params, run_id, done)
        job.carried = list(carried) or None
        with self._lock:
            self.runs.setdefault(run_id, []).append(job)
            # A turn that crashed before writing again leaves its entry until the run's next
            # write here, which may never come (another process took the run over): beyond a
            # bound, the oldest are dropped, as a crash would have dropped them.
            if len(self.runs) > MAX_RUNS:
                del self.runs[next(iter(self.runs))]
        if queued and tries:
            timer = threading.Timer(RESEND_SECONDS, self._resend, (run_id, job))
            timer.daemon = True
            timer.start()
        elif queued:
            self._writer.submit_deferred(job)

    def _resend(self, run_id: str, job: Job) -> None:
        """Queue ``job`` again unless a later statement of its run took it along meanwhile."""
        with self._lock:
            if job not in self.runs.get(run_id, ()):
                return
            try:
                self._writer.submit_deferred(job)
                return
            except RuntimeError as exc:  # the store closed meanwhile
                closed = exc
        job.future.set_exception(closed)  # its ``then`` hears of it (outside the lock it takes)

    async def in_order(self, run_id: str) -> list[Job]:
        """The run's deferred statements that its next statement must carry: those not sent yet
        (taken back from the writer's queue); one that a writer took already is waited for, so
        that it is never written after that statement."""
        if not self.runs:  # the common case, without the lock
            return []
        with self._lock:
            jobs = self.runs.pop(run_id, [])
        carried = []
        for job in jobs:
            if not job.deferred or self._writer.take_back(job):
                carried.append(job)
            else:
                with contextlib.suppress(Exception):  # its own failure is its ``then``'s
                    await asyncio.wrap_future(job.future)
        return carried

    async def write(self, run_id: str) -> None:
        """Before a turn write that is not one grouped statement: the run's deferred statements
        first, committed (rarely any: a deletion is followed by the step's result)."""
        carried = await self.in_order(run_id)
        if carried:
            await self._writer.submit("SELECT 1", None, run_id, carried=carried)
