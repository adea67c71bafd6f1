"""The local runtime: runs turns as asyncio tasks in this process, on any store.

Only active turns cost a task; a suspended run costs a few rows. The loop claims due work from the
store's queue (so runs resumed, timed out or orphaned by other processes are picked up), expires
due waits, heartbeats the leases it holds and frees the leases of dead processes on this host;
with a retention it also purges runs that finished longer ago (:class:`~pyworkflow.store.Purger`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

from .. import _clock
from .._crashpoints import crashpoint
from .._engine import execute_turn
from ..store import (
    YOUNG_GC_THRESHOLD,
    Claim,
    Fence,
    Purger,
    QueueVacuum,
    RunState,
    Store,
    WaitStatus,
    hold_gc_pace,
    metrics,
)

log = logging.getLogger("pyworkflow.runtime")
_HOST = socket.gethostname()

#: How often an idle runtime polls a store that pushes (PostgreSQL's LISTEN/NOTIFY): every
#: transaction that makes a run due now sends a notification, a reconnected listener wakes the loop
#: once, a future due time already stored (a timer, a deadline, a lease running out) is the poll's
#: own ``next_due``, and a turn suspending here (which may have stored a new one) brings the next
#: poll to ``poll_interval`` after the last, as on a store that does not push. The poll only backs
#: these up: an idle process need not run it 20 times a second.
PUSHED_POLL_INTERVAL = 1.0


def owner_id() -> str:
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _first_deadline(state: RunState | None) -> float | None:
    """The earliest deadline of the run's pending waits (timers, hooks' timeouts, retries'
    back-offs), among them any the turn just created; None without one."""
    if state is None:
        return None
    times = [
        w.expires_at
        for w in state.waits.values()
        if w.expires_at is not None and w.status == WaitStatus.PENDING
    ]
    return min(times, default=None)


def _dead_local_owners(owners: Iterable[str], me: str) -> list[str]:
    """Lease owners on this host whose process no longer exists."""
    dead = []
    for owner in owners:
        host, _, rest = owner.partition(":")
        pid_text = rest.partition(":")[0]
        if host != _HOST or owner == me or not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            dead.append(owner)
        except PermissionError:  # alive, someone else's
            pass
    return dead


class _Permits:
    """Permits held by :meth:`LocalRuntime.permits` until the block ends (a class, not a
    generator's context manager: one of these a start and a decision)."""

    __slots__ = ("granted", "runtime")

    def __init__(self, runtime: LocalRuntime, granted: int) -> None:
        self.runtime = runtime
        self.granted = granted

    def __enter__(self) -> int:
        return self.granted

    def __exit__(self, *exc: object) -> None:
        self.runtime._reserved -= self.granted


class LocalRuntime:
    def __init__(
        self,
        store: Store,
        *,
        lease_ttl: float = 30.0,
        poll_interval: float = 0.05,
        max_concurrency: int = 1000,
        max_crashes: int = 5,
        retention: float | None = None,
        gc_threshold: int | None = YOUNG_GC_THRESHOLD,
    ) -> None:
        self.store = store
        self.owner = owner_id()
        self.lease_ttl = lease_ttl
        self.poll_interval = poll_interval
        self.max_concurrency = max_concurrency
        self.max_crashes = max_crashes
        self.loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._sleep: asyncio.Timeout | None = None  # the loop's sleep between polls, while it sleeps
        self._polled_at = 0.0  # loop time of the last poll
        self._ended = False  # a turn ended since the last poll began
        self._tasks: set[asyncio.Task[None]] = set()
        #: the claim of each turn whose task has not begun yet (a task cancelled before it
        #: began runs none of its code, so its lease is released by stop())
        self._unstarted: dict[asyncio.Task[None], Fence] = {}
        #: set except while the loop's poll is being made: stop() waits for it rather than
        #: cancel it (a cancelled caller's write commits all the same, and its claims would be lost)
        self._not_polling = asyncio.Event()
        self._not_polling.set()
        self._stopping = False  # stop() has begun: the loop makes no new poll
        self._stopped: asyncio.Future[None] | None = None  # a stop() under way: later calls wait for it
        #: releases of leases whose claims reached a stopped runtime (see abandoned())
        self._releasing: set[asyncio.Task[None]] = set()
        self._in_turn: dict[str, int] = {}  # run id -> its turns active here (see in_turn())
        self._reserved = 0  # permits held for claims being made (see permits())
        self._runner: asyncio.Task[None] | None = None
        self._heart: asyncio.Task[None] | None = None
        self._changed: dict[str, asyncio.Event] = {}  # see watching()
        self._watchers: dict[str, int] = {}
        self._unsubscribe: Callable[[], None] | None = None
        self.turns = 0  # turns executed by this runtime (for tests and benchmarks)
        #: retention (``configure(retention=...)``): finished runs older than it are purged here
        self.purger = None if retention is None else Purger(store.database, retention)
        #: on PostgreSQL, the run queue's vacuum while the runtime runs (store/_pg_vacuum.py)
        self.vacuum: QueueVacuum | None = None
        #: the garbage collector's young-generation threshold while the runtime runs
        #: (store/_gc.py; None leaves the collector alone)
        self.gc_threshold = gc_threshold
        self._gc_release: Callable[[], None] | None = None
        self._uncount: Callable[[], None] | None = None  # see metrics.count_in_use
        metrics.PERMITS.set(max_concurrency)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._runner is not None and not self._runner.done()

    async def start(self) -> None:
        if self.running:
            return
        self.loop = asyncio.get_running_loop()
        # Stores that can push (PostgreSQL's LISTEN/NOTIFY) wake the loop the moment another
        # process makes a run due; polling then only backs the notifications up.
        subscribe = getattr(self.store, "subscribe", None)
        if callable(subscribe):
            loop = self.loop
            self._unsubscribe = subscribe(lambda: loop.call_soon_threadsafe(self._wake.set))
        # The runner exists (so ``running`` is true) before the first await: callers that start
        # the runtime concurrently (many ``start()`` at once) then share it instead of each
        # building one whose loop would poll the store forever. It waits for ``go``: leases of
        # dead processes are freed before the first claim, as before.
        go = asyncio.Event()
        self.vacuum = QueueVacuum.of(getattr(self.store, "database", None))
        self._gc_release = hold_gc_pace(self.gc_threshold)
        tasks = self._tasks
        self._uncount = metrics.count_in_use(lambda: len(tasks))
        self._runner = asyncio.create_task(self._run(go), name="pyworkflow-runtime")
        try:
            await self._free_dead_leases()
        except BaseException:
            self._runner.cancel()
            self._runner = None
            self._let_go()
            raise
        go.set()
        self._heart = asyncio.create_task(self._heartbeat(), name="pyworkflow-heartbeat")

    async def stop(self) -> None:
        """Stop claiming; cancel active turns, whose leases are released for another process:
        by each turn as it is cancelled, and here those of the turns cancelled before they
        began. A poll being made is let finish first (its claims become turns, cancelled with
        the rest): cancelled, it would commit all the same and its claims be lost. A lease left
        held would wait until it ran out (``lease_ttl``; sooner once this process is gone) and
        then count as a crash of its run (``run_recovered``). A second call while one is under
        way returns when that one has."""
        if self._stopped is not None:
            await asyncio.shield(self._stopped)
            return
        self._stopped = asyncio.get_running_loop().create_future()
        try:
            await self._stop()
        finally:
            self._stopped.set_result(None)
            self._stopped = None

    async def _stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._stopping = True
        for turn in list(self._tasks):  # first, before a poll in flight lets them begin
            turn.cancel()
        await self._not_polling.wait()  # bounded by the store's write timeout
        for task in (self._runner, self._heart):
            if task is not None:
                task.cancel()
        for turn in list(self._tasks):  # and the turns of that poll's claims
            turn.cancel()
        pending = [t for t in (self._runner, self._heart, *self._tasks) if t is not None]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        # A turn cancelled before it began never freed its permit (its own code frees it)
        for turn in [t for t in self._tasks if t.done()]:
            self._tasks.discard(turn)
        self._runner = self._heart = None
        self._in_turn.clear()  # a turn cancelled before it began never left it
        await self._release_orphans()
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)
        self._stopping = False
        self._let_go()

    async def _release_orphans(self) -> None:
        """Release the leases of the turns cancelled before they began (see :meth:`stop`)."""
        fences = list(self._unstarted.values())
        self._unstarted.clear()
        if not fences:
            return
        now = _clock.now()
        outcomes = await asyncio.gather(
            *(self.store.release(f, now=now) for f in fences), return_exceptions=True
        )
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        log.info("released %d lease(s) of turns that never began", len(fences) - len(failed))
        if failed:  # each such lease runs out (lease_ttl) and its run is then recovered as a crash
            log.warning("could not release %d lease(s) of turns that never began: %s", len(failed), failed[0])

    def _let_go(self) -> None:
        """Give back what :meth:`start` took besides the tasks: the queue's vacuum, the store's
        notifications, the garbage collector's pace."""
        if self.vacuum is not None:
            self.vacuum.close()
            self.vacuum = None
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._gc_release is not None:
            self._gc_release()
            self._gc_release = None
        if self._uncount is not None:
            self._uncount()
            self._uncount = None

    def wake(self) -> None:
        self._wake.set()

    # -- running work ---------------------------------------------------------------------------

    async def submit(self, run_id: str, workflow: str, input: bytes) -> None:
        """Create a run and, with capacity to spare, run its first turn here without a round trip
        through the queue; at capacity the run waits in the queue like any other."""
        with self.permits(1) as granted:
            claim = await self.store.create_run(
                run_id,
                workflow,
                input,
                now=_clock.now(),
                lease_owner=self.owner if granted else None,
                lease_ttl=self.lease_ttl,
                abandoned=self.abandoned,
            )
            crashpoint("after_run_created")
            if claim is not None:
                self._spawn(claim, RunState())
            else:
                self.wake()

    @property
    def free_permits(self) -> int:
        """Turns this runtime may still take on: ``max_concurrency`` less those running and those
        held for claims being made."""
        return self.max_concurrency - len(self._tasks) - self._reserved

    def permits(self, wanted: int) -> _Permits:
        """Hold up to ``wanted`` free permits for claims about to be made, across the store call
        that makes them (``with runtime.permits(n) as granted:``); ``granted``: how many (0 at
        capacity). Each claim made must be spawned (a task) before the block ends. Without the
        hold, a burst of starts or decisions all saw the same free permits while their claims
        were committing, and all ran at once."""
        granted = max(0, min(wanted, self.free_permits))
        self._reserved += granted
        return _Permits(self, granted)

    def adopt(self, claim: Claim) -> None:
        """Run a turn claimed for this runtime elsewhere in this process (a decision's
        transaction claimed the run it woke: ``Store.resolve_wait_and_claim``)."""
        crashpoint("after_claim")
        self._spawn(claim, None)

    def abandoned(self, claim: Claim) -> None:
        """A claim made for this runtime whose caller was cancelled while its write was in flight
        (``start`` or ``resume_hook`` under a timeout): the write committed all the same, so the
        lease is held here. The turn runs here as if the caller had waited; a runtime that
        stopped releases the lease instead. Left alone, the lease would be renewed by every
        heartbeat while other turns run, and the run would wait with nothing running it."""
        if self.running and not self._stopping:
            log.info(
                "run %s: its caller stopped waiting for the claim; the turn runs all the same",
                claim.fence.run_id,
                extra={"run_id": claim.fence.run_id},
            )
            self._spawn(claim, None)
            return
        release = asyncio.ensure_future(self.store.release(claim.fence, now=_clock.now()))
        self._releasing.add(release)
        release.add_done_callback(self._released)

    def _released(self, release: asyncio.Task[None]) -> None:
        self._releasing.discard(release)
        if not release.cancelled() and release.exception() is not None:
            log.warning("could not release the lease of an abandoned claim: %s", release.exception())

    def _spawn(self, claim: Claim, state: RunState | None) -> None:
        run_id = claim.fence.run_id
        task = asyncio.create_task(self._turn(claim, state), name=f"pyworkflow-turn:{run_id}")
        self._tasks.add(task)
        self._unstarted[task] = claim.fence
        self._in_turn[run_id] = self._in_turn.get(run_id, 0) + 1

    async def _turn(self, claim: Claim, state: RunState | None) -> None:
        run_id = claim.fence.run_id
        task = asyncio.current_task()
        if task is not None:
            self._unstarted.pop(task, None)
        # Whether the turn may have left something for the loop's next poll: True unless the run
        # ended (completed, failed, cancelled) or its lease was lost, which stores no due time
        # and leaves nothing due (no run waits on another).
        suspended = True
        try:
            if state is None:
                state = await claim.load_state(self.store)
            self.turns += 1
            suspended = await execute_turn(self.store, claim, state, due=self._due)
        except asyncio.CancelledError:
            try:
                await asyncio.shield(self.store.release(claim.fence, now=_clock.now()))
            finally:
                raise
        except Exception:
            metrics.labelled(metrics.CRASHES, "workflow").inc()
            log.exception(
                "run %s: turn crashed; its lease will expire and the run will be retried",
                run_id,
                extra={"run_id": run_id, "attempt": claim.fence.epoch},
            )
        finally:
            # Out of the turn and its watchers told in one step: a look between the two would
            # wait for an end that has already been signalled.
            left = self._in_turn.pop(run_id, 1) - 1
            if left:
                self._in_turn[run_id] = left
            event = self._changed.pop(run_id, None)
            if event is not None:
                event.set()
            # The turn's permit is free from here, not from its task's done callback: the loop
            # woken below runs before that callback, and it would poll still counting this turn
            # (at capacity, claiming nothing and then sleeping a poll_interval while every turn
            # ending meanwhile saw free permits and did not wake it).
            full = self.free_permits <= 0
            if task is not None:
                self._tasks.discard(task)
            # A turn that frees capacity the loop was short of wakes it. One that suspends may
            # have stored a due time (a timer, a deadline, a retry's back-off) that the last poll
            # did not see, or have left the run due again (a wake-up during the turn). The
            # latter is told once the turn's end commits: by the store's NOTIFY, or on SQLite
            # by ``_due``. On SQLite the loop polls every poll_interval anyway, so only a due
            # time before the next poll moves it. A turn that ended the run leaves the next
            # poll where it was (it stores nothing due; other processes' work waits for the
            # next poll on a store that does not notify).
            if full:
                self._wake.set()
            elif suspended and self._unsubscribe is None:
                self._poll_by(_first_deadline(state))
            elif suspended:  # the poll may be a PUSHED_POLL_INTERVAL away: no later than usual
                self._ended = True
                soon, sleep = self._polled_at + self.poll_interval, self._sleep
                if sleep is not None and not sleep.expired() and (sleep.when() or soon) > soon:
                    sleep.reschedule(soon)

    def _due(self) -> None:
        """The end of a suspended turn committed and left its run due (a wake-up came during
        the turn): poll now. On any thread (the store's writer's, or this loop's); a store that
        notifies never calls it."""
        loop = self.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to wake
                loop.call_soon_threadsafe(self._wake.set)

    def _poll_by(self, deadline: float | None) -> None:
        """Have the loop poll no later than ``deadline`` (a time of ``_clock``; None: leave it)."""
        if deadline is None:
            return
        sleep = self._sleep
        if sleep is None:  # the loop is polling now, perhaps having read before the turn's wait
            self._wake.set()
            return
        at = asyncio.get_running_loop().time() + max(0.0, deadline - _clock.now())
        when = sleep.when()
        if not sleep.expired() and (when is None or when > at):
            sleep.reschedule(at)

    def in_turn(self, run_id: str) -> bool:
        """Whether a turn of ``run_id`` is active in this process: until it ends, the run is
        ``running`` (or was cancelled meanwhile, which the turn's end then reports)."""
        return run_id in self._in_turn

    @contextlib.contextmanager
    def watching(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set the next time a turn of ``run_id`` ends in this process, kept for as long
        as some block watches it (so a run nobody watches any more, or one that never runs here,
        leaves nothing behind)."""
        event = self._changed.get(run_id)
        if event is None:
            event = self._changed[run_id] = asyncio.Event()
        self._watchers[run_id] = self._watchers.get(run_id, 0) + 1
        try:
            yield event
        finally:
            left = self._watchers.pop(run_id) - 1
            if left:
                self._watchers[run_id] = left
            else:  # nobody watches the run any more: whatever event it has is nobody's
                self._changed.pop(run_id, None)

    async def _run(self, go: asyncio.Event) -> None:
        await go.wait()
        next_dead_check = time.monotonic() + self.lease_ttl / 2
        while True:
            try:
                timeout = await self._tick()
                if self.vacuum is not None:
                    self.vacuum.tick()
                if self.purger is not None:
                    report = await self.purger.tick()
                    if report is not None and not report.finished:  # a backlog: the next pass soon
                        timeout = min(timeout, self.poll_interval)
                if time.monotonic() >= next_dead_check:
                    next_dead_check = time.monotonic() + self.lease_ttl / 2
                    await self._free_dead_leases()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("runtime loop error; retrying")
                timeout = 1.0
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
            # races its timeout, which would leave stop() waiting forever.
            try:
                async with asyncio.timeout(max(timeout, 0.001)) as self._sleep:
                    await self._wake.wait()
            except TimeoutError:
                pass
            finally:
                self._sleep = None
            self._wake.clear()

    async def _tick(self) -> float:
        """Expire due waits and claim due runs; return how long to sleep."""
        if self._stopping:  # stop() waits for a poll in flight, and cancels the loop after it
            return self.poll_interval
        now = _clock.now()
        self._polled_at = asyncio.get_running_loop().time()
        self._ended = False
        with self.permits(self.max_concurrency) as free:
            # One store call (one round trip on PostgreSQL): expire due waits, claim, next due time.
            # Not cancelled by stop(), which waits for it (_not_polling): its claims become turns
            # below, in this step, before stop() cancels them.
            self._not_polling.clear()
            try:
                poll = await self.store.poll(
                    self.owner, limit=free, now=now, lease_ttl=self.lease_ttl, max_crashes=self.max_crashes
                )
            finally:
                self._not_polling.set()
            for claim in poll.claims:
                crashpoint("after_claim")
                self._spawn(claim, None)
        if free <= 0:  # at capacity a finishing turn wakes the loop (its permit freed first)
            return self.poll_interval
        # A store that pushes wakes the loop itself (see PUSHED_POLL_INTERVAL).
        pushed = self._unsubscribe is not None and not self._ended
        idle = max(self.poll_interval, PUSHED_POLL_INTERVAL) if pushed else self.poll_interval
        due = poll.next_due
        if due is None:
            return idle
        return max(0.0, min(idle, due - _clock.now()))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            if self._tasks:
                try:
                    await self.store.heartbeat(self.owner, lease_expires_at=_clock.now() + self.lease_ttl)
                except Exception:
                    log.exception("heartbeat failed")

    async def _free_dead_leases(self) -> None:
        dead = _dead_local_owners(await self.store.lease_owners(now=_clock.now()), self.owner)
        if dead:
            count = await self.store.expire_leases_of(dead, now=_clock.now())
            metrics.labelled(metrics.LEASE_EXPIRIES, "workflow").inc(count)
            log.info("freed %d run(s) left by dead process(es) %s", count, ", ".join(dead))
