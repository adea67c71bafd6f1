"""The group commit's jobs (:class:`Job`) and how their callers hear of them: released after the
commit that holds their work, each on its own event loop (``_deliver``, ``_settle``), or, when a
caller stopped waiting, through its ``abandoned`` hand-over. The writers are
:class:`~pyworkflow.store._group_commit.GroupCommitWriter`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
from collections.abc import Callable
from typing import Any

log = logging.getLogger("pyworkflow.store.group_commit")

#: The rows of one statement.
Rows = list[tuple[Any, ...]]
#: What a statement nobody waits for calls when its transaction ended: ``then(rows, error)``.
Then = Callable[[Rows | None, BaseException | None], None]
_NEVER = float("inf")
#: Jobs a writer takes at once (a transaction's most).
MAX_GROUP = 512
#: A job's value before it ran.
_PENDING: Any = object()
_by_key = operator.attrgetter("key")
#: The key of a statement that finds the run it locks by itself and never waits for a lock (it
#: skips a run locked elsewhere: ``SKIP LOCKED``): sorted after the statements of every run (ids
#: below U+10FFFF, a noncharacter), it takes its lock after its group's others, so it holds none
#: while they wait.
LOCKS_LAST = "\U0010ffff"


class Job:
    """One unit of work for the writer and where its caller waits: a function of the connection
    (``fn``), or one statement (``sql`` and ``params``; ``key``: the run it locks, ``""`` for a
    read, ``None`` to run alone). ``loop`` None: ``future`` is a ``concurrent.futures.Future`` (or,
    for a deferred write, a :class:`_Then`).
    ``deadline``: the ``time.monotonic()`` after which it must not start."""

    __slots__ = (
        "abandoned", "carried", "deadline", "deferred", "error", "fn", "future", "key", "loop", "params",
        "sql", "value",
    )  # fmt: skip

    def __init__(
        self,
        fn: Callable[[Any], Any] | None,
        sql: str | None,
        params: Any,
        key: str | None,
        loop: asyncio.AbstractEventLoop | None,
        future: Any,
        deadline: float = _NEVER,
    ) -> None:
        self.deadline = deadline
        self.fn = fn
        self.sql = sql
        self.params = params
        self.key = key
        self.loop = loop
        self.future = future
        self.value: Any = _PENDING
        self.error: BaseException | None = None
        self.deferred = False
        #: statements of the same key run just before this one, in its transaction (``submit``)
        self.carried: list[Job] | None = None
        #: called on the caller's loop with the value when the job committed but its caller had
        #: stopped waiting (cancelled): see :meth:`GroupCommitWriter.write`
        self.abandoned: Callable[[Any], None] | None = None


class _Then:
    """Where a deferred write's outcome goes (``then(error)``, on the thread that settles it): in
    place of a ``concurrent.futures.Future``, whose lock and condition nobody waits on here."""

    __slots__ = ("then",)

    def __init__(self, then: Callable[[BaseException | None], None]) -> None:
        self.then = then

    def set_result(self, value: Any) -> None:
        self._tell(None)

    def set_exception(self, error: BaseException) -> None:
        self._tell(error)

    def _tell(self, error: BaseException | None) -> None:
        try:
            self.then(error)
        except Exception:  # as a future's callback: logged, and the other callers still hear
            log.exception("a deferred write's callback failed")


def _unpack(jobs: list[Job]) -> list[Job]:
    """``jobs`` with the statements each one carries just before it (see ``submit``; a carried
    statement taken back from the queue may carry others in turn)."""
    if not any(job.carried for job in jobs):
        return jobs
    unpacked: list[Job] = []

    def add(job: Job) -> None:
        if job.carried:
            inner, job.carried = job.carried, None
            for each in inner:
                add(each)
        unpacked.append(job)

    for job in jobs:
        add(job)
    return unpacked


def _deliver(jobs: list[Job]) -> None:
    """Release the callers of ``jobs``: one wake-up per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Job]] = {}
    for job in jobs:
        loop = job.loop
        if loop is None:
            if job.error is not None:
                job.future.set_exception(job.error)
            else:
                job.future.set_result(job.value)
            continue
        mine = by_loop.get(loop)
        if mine is None:
            by_loop[loop] = [job]
        else:
            mine.append(job)
    for loop, mine in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, mine)


def _settle(jobs: list[Job]) -> None:
    """On a caller's loop: hand each job's outcome to its caller (gone callers are skipped)."""
    for job in jobs:
        future = job.future
        if future.done():  # the caller was cancelled; its work is committed all the same
            if job.abandoned is not None and job.error is None:
                _hand_over(job)
            continue
        if job.error is not None:
            future.set_exception(job.error)
        else:
            future.set_result(job.value)


def _hand_over(job: Job) -> None:
    """Give a committed job's value to its ``abandoned`` callback (its caller was cancelled)."""
    try:
        job.abandoned(job.value)  # type: ignore[misc]
    except Exception:
        log.exception("a cancelled caller's committed write: its hand-over failed")
