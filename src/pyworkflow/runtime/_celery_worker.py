"""The worker side of the Celery runtime: the turn task, the lease heartbeat and the sweeper.

One :class:`Worker` per process (prefork children each get their own, after the fork). The turns
of a process run on one event loop in a thread of their own (as the local runtime's turns share
its loop); the pool thread that took the message waits for its turn to end, so Celery's
concurrency bounds the turns in flight and acks-late still acknowledges after the turn. The store
does its I/O on its own threads, so any Celery pool works (``threads`` is the default of
``pyworkflow worker``; ``prefork`` and ``solo`` work too).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery import Celery  # type: ignore[import-untyped]

from .. import _clock, _tracing
from .._crashpoints import crashpoint
from .._engine import execute_turn
from ..store import Purger, QueueVacuum, metrics, open_store, parse_age, tracing
from ._celery import (
    DEFAULT_DISPATCH_GRACE,
    MAX_DISPATCH_GRACE,
    MIN_DISPATCH_GRACE,
    TURN_TASK,
    CeleryOptions,
    CeleryStore,
    QueueDepth,
    celery_store,
    dispatch,
    make_app,
)
from ._local import _dead_local_owners, owner_id

#: A due queue row as ``ready_runs`` lists it: (run id, epoch, due time).
Ready = tuple[str, int, float]

log = logging.getLogger("pyworkflow.celery")


@dataclass(slots=True)
class WorkerSettings:
    storage: str
    celery: CeleryOptions
    lease_ttl: float = 30.0
    max_crashes: int = 5
    #: turns one task may run back to back for its run (a decision arrived during a turn)
    max_turns_per_task: int = 20
    sweep_interval: float = 1.0
    #: an unleased due row is re-published only after it waited this long for its message (lost
    #: messages are rare; a backlog of queued messages must not be published again)
    dispatch_grace: float = DEFAULT_DISPATCH_GRACE
    imports: Sequence[str] = field(default_factory=tuple)
    #: seconds after which the sweeper purges finished runs (``--retention``); None: kept
    retention: float | None = None


class Worker:
    """Executes turns for one process and heartbeats the leases of the turns it runs."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.owner = owner_id()
        self.pid = os.getpid()
        self.store: CeleryStore = celery_store(open_store(settings.storage))
        self.turns = 0
        self._active = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # Every turn of this process runs on one event loop in its own thread; the pool's threads
        # only wait for their turn to end (see ``run``).
        self._turn_loop = asyncio.new_event_loop()
        self._turn_thread = threading.Thread(
            target=self._turn_loop.run_forever, name="pyworkflow-turns", daemon=True
        )
        self._turn_thread.start()
        self._beat = threading.Thread(target=self._heartbeat, name="pyworkflow-heartbeat", daemon=True)
        self._beat.start()
        self._uncount = metrics.count_in_use(lambda: self._active)

    def run(self, run_id: str, woken_by: dict[str, str] | None = None) -> int:
        """The turn task: run the turns ``run_id`` is due for; return how many ran (0: not due).

        The turns run on the process's turn loop, like the local runtime's turns share its loop,
        and the calling pool thread blocks until they end (so Celery's concurrency still bounds
        the turns in flight, and acks-late still acknowledges only after the turn). One loop
        instead of one per pool thread: the store wakes one loop per group commit, not one per
        thread, and the threads do not compete for the GIL while they wait. As everywhere in
        asyncio, a step must not block the loop (use ``asyncio.to_thread`` for blocking calls)."""
        if self._stop.is_set():
            raise RuntimeError("the pyworkflow worker is closed")
        return asyncio.run_coroutine_threadsafe(self._turns(run_id, woken_by), self._turn_loop).result()

    async def _turns(self, run_id: str, woken_by: dict[str, str] | None = None) -> int:
        s = self.settings
        _tracing.waker.set(woken_by)  # this task's context: the turns below link to it
        ran = 0
        while ran < s.max_turns_per_task:
            claim = await self.store.claim_run(
                run_id, self.owner, now=_clock.now(), lease_ttl=s.lease_ttl, max_crashes=s.max_crashes
            )
            if claim is None:
                return ran
            crashpoint("after_claim")
            with self._lock:
                self._active += 1
            try:
                state = await claim.load_state(self.store)
                suspended = await execute_turn(self.store, claim, state)
            except Exception:
                # Not the workflow's failure (execute_turn records those) but ours, e.g. the
                # database went away: give the lease back rather than heartbeat it forever; the
                # sweeper publishes the run again.
                metrics.labelled(metrics.CRASHES, "workflow").inc()
                log.exception(
                    "run %s: turn crashed; releasing its lease",
                    run_id,
                    extra={"run_id": run_id, "attempt": claim.fence.epoch},
                )
                with contextlib.suppress(Exception):
                    await self.store.release(claim.fence, now=_clock.now())
                raise
            finally:
                with self._lock:
                    self._active -= 1
                    self.turns += 1
            ran += 1
            if not suspended:  # finished, or another worker holds it now: nothing left to claim
                return ran
        dispatch([run_id], s.celery)  # still due: let another message continue it
        return ran

    def _heartbeat(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            while not self._stop.wait(self.settings.lease_ttl / 3):
                if self._active:
                    try:
                        expires = _clock.now() + self.settings.lease_ttl
                        loop.run_until_complete(self.store.heartbeat(self.owner, lease_expires_at=expires))
                    except Exception:
                        log.exception("heartbeat failed")
        finally:
            loop.close()

    def close(self) -> None:
        self._uncount()
        self._stop.set()
        self._turn_loop.call_soon_threadsafe(self._turn_loop.stop)
        self._turn_thread.join(timeout=10)
        self.store.close()


def next_sweep_in(due: float | None, deadline: float | None, now: float, interval: float) -> float:
    """How long the sweeper sleeps after a sweep: until the next deadline (its run's turn is
    published when it falls due) or the next queue row or lease falls due, at most ``interval``.
    ``due`` is the store's next due time (deadlines, rows and leases), ``deadline`` its next
    deadline alone. A row already due was weighed by this sweep (published, or left to its
    message or its grace): it waits for the next sweep. Before, any row due in the past (a
    backlog: runs waiting for a worker) made the sweeper sweep every 50 ms, and ask the broker
    for its queue's depth each time, for as long as the backlog lasted; a deadline due in the
    past (more than one sweep expires) still makes it sweep again at once."""
    pause = interval
    if deadline is not None:
        pause = min(pause, deadline - now)
    if due is not None and due > now:
        pause = min(pause, due - now)
    return max(0.05, pause)


class Sweeper:
    """The periodic sweeper: expires due waits (hook deadlines, durable sleeps, retry back-offs),
    frees the leases of dead workers on this host, publishes turns for due runs nobody is
    running and, with a retention, purges runs that finished longer ago. Safe to run in several
    processes at once (each step is a conditional transition)."""

    def __init__(self, settings: WorkerSettings, store: CeleryStore | None = None) -> None:
        self.settings = settings
        self.owner = owner_id()
        self._own_store = store is None
        self.store: CeleryStore = store or celery_store(open_store(settings.storage))
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._recent: dict[tuple[str, int, float], float] = {}  # (run, epoch, due) -> published at
        self._thread: threading.Thread | None = None
        self.published = 0
        self.purger = None if settings.retention is None else Purger(self.store.database, settings.retention)
        #: on PostgreSQL, the run queue's vacuum (store/_pg_vacuum.py)
        self.vacuum = QueueVacuum.of(self.store.database)
        self._depth = QueueDepth(settings.celery)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run_forever, name="pyworkflow-sweeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._depth.close()
        if self.vacuum is not None:
            self.vacuum.close()
        if self._own_store:
            self.store.close()

    def run_forever(self) -> None:
        unsubscribe = getattr(self.store, "subscribe", None)
        cancel = unsubscribe(self._poke.set) if callable(unsubscribe) else None
        loop = asyncio.new_event_loop()
        try:
            while not self._stop.is_set():
                try:
                    pause = loop.run_until_complete(self.sweep_once())
                except Exception:
                    log.exception("sweep failed; retrying")
                    pause = self.settings.sweep_interval
                self._poke.wait(pause)
                self._poke.clear()
        finally:
            if cancel is not None:
                cancel()
            loop.close()

    async def _unqueued(self, stale: list[Ready], now: float) -> list[Ready]:
        """Of the ``stale`` rows (due for ``dispatch_grace``, oldest first), those no message in
        the broker's queue stands for. The queue is first in, first out: its D ready messages
        are for the D runs that became due last, so of the U runs due and unclaimed only the
        U - D that became due first lack one (a worker holds it, or it was lost), and only they
        are published again. Without this, a backlog older than ``dispatch_grace`` was published
        again whole, every ``lease_ttl``, lengthening itself. A message that does not stand for
        a due run (a duplicate; another application's task in the queue) can only delay a lost
        message's turn until the queue has drained that far, never lose it."""
        if not stale:
            return stale
        depth = self._depth.read()
        if not depth:  # nothing queued (or the broker cannot say): every stale row lacks one
            return stale
        due = await self.store.count_ready(now=now, limit=depth + len(stale))
        return stale[: max(0, due - depth)]

    async def sweep_once(self) -> float:
        """One sweep; returns how long to sleep before the next."""
        s, store = self.settings, self.store
        swept_at = _clock.now()
        expired = await store.expire_due_waits(now=swept_at)
        dead = _dead_local_owners(await store.lease_owners(now=swept_at), self.owner)
        if dead:
            freed = await store.expire_leases_of(dead, now=swept_at)
            metrics.labelled(metrics.LEASE_EXPIRIES, "workflow").inc(freed)
            log.info("freed %d run(s) of dead worker(s) %s", freed, ", ".join(dead))
        now = _clock.now()
        # Rows whose lease ran out (dead workers) and rows nobody published for a while, less
        # those a message in the broker's queue stands for ...
        stale = await self._unqueued(await store.ready_runs(now=now, due_before=now - s.dispatch_grace), now)
        ready = list(stale)
        if expired:  # ... and the runs this sweep's expiries just woke (due at swept_at exactly)
            ready += await store.ready_runs(now=now, due_before=swept_at, due_after=swept_at)
        # One message per wake-up: a row is (run, epoch, due time), so the same stale row is not
        # published again within lease_ttl, but a new wake-up of a run published a moment ago
        # (its second timer, its next retry, a new claim that died) is a new row, published now.
        fresh = [r for r in dict.fromkeys(ready) if now - self._recent.get(r, 0.0) > s.lease_ttl]
        if fresh:
            sent = dispatch(dict.fromkeys(r[0] for r in fresh), s.celery)
            self.published += sent
            again = set(stale)
            metrics.TURNS_REPUBLISHED.inc(min(sent, sum(1 for r in fresh if r in again)))
            self._recent.update(dict.fromkeys(fresh, now))
            log.info("published %d turn(s) (%d waits expired)", len(fresh), expired)
        if len(self._recent) > 100_000:
            self._recent = {k: v for k, v in self._recent.items() if now - v <= s.lease_ttl}
        if self.purger is not None:
            await self.purger.tick()
        if self.vacuum is not None:
            self.vacuum.tick()
        due, deadline = await store.next_wake()
        return next_sweep_in(due, deadline, _clock.now(), s.sweep_interval)


# -- the process's worker, and the Celery app a worker runs -------------------------------------

_worker: Worker | None = None
_worker_lock = threading.Lock()
_settings: WorkerSettings | None = None


def settings_from_environment() -> WorkerSettings:
    """For ``celery -A pyworkflow.runtime._celery_worker worker``: everything from the environment."""
    storage = os.environ.get("PYWORKFLOW_STORAGE", "")
    if not storage:
        raise RuntimeError("set PYWORKFLOW_STORAGE=postgresql://... for the pyworkflow Celery worker")
    imports = tuple(m for m in os.environ.get("PYWORKFLOW_IMPORTS", "").split(",") if m)
    kept = os.environ.get("PYWORKFLOW_RETENTION", "").strip()
    return WorkerSettings(
        storage=storage,
        celery=CeleryOptions.from_extra({"queue": os.environ.get("PYWORKFLOW_QUEUE")}),
        lease_ttl=_env(
            "PYWORKFLOW_LEASE_TTL", 30.0, float, lambda v: 0 < v < math.inf, "a positive number of seconds"
        ),
        max_crashes=int(
            _env("PYWORKFLOW_MAX_CRASHES", 5, int, lambda v: v >= 1, "a whole number of at least 1")
        ),
        dispatch_grace=_env(
            "PYWORKFLOW_DISPATCH_GRACE",
            DEFAULT_DISPATCH_GRACE,
            float,
            lambda v: MIN_DISPATCH_GRACE <= v <= MAX_DISPATCH_GRACE,
            f"a number of seconds from {MIN_DISPATCH_GRACE:g} to {MAX_DISPATCH_GRACE:g}",
        ),
        imports=imports,
        retention=parse_age(kept, what="PYWORKFLOW_RETENTION") if kept else None,
    )


def _env(
    name: str, default: float, parse: Callable[[str], float], ok: Callable[[float], bool], what: str
) -> float:
    """A number from the environment (unset or empty: ``default``), refused unless ``ok``, as the
    ``pyworkflow worker`` option of the same setting refuses it."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = parse(text)
    except ValueError:
        value = math.nan
    if not ok(value):  # NaN fails every test
        raise RuntimeError(f"{name} must be {what}, not {text!r}")
    return value


def current_worker() -> Worker:
    """This process's worker, created on first use (after a prefork fork, a new one)."""
    global _worker
    with _worker_lock:
        if _worker is None or _worker.pid != os.getpid():
            _worker = Worker(_settings or settings_from_environment())
        return _worker


def _turn(run_id: str) -> int:
    return current_worker().run(run_id, _message_trace())


def _message_trace() -> dict[str, str] | None:
    """The W3C headers the turn's message carries (what published it), when tracing is on."""
    if not tracing.enabled():
        return None
    from celery import current_task

    request = current_task.request if current_task else None
    headers = getattr(request, "headers", None) or {}
    found = {k: getattr(request, k, None) or headers.get(k) for k in ("traceparent", "tracestate")}
    return {k: v for k, v in found.items() if isinstance(v, str)} or None


def build_app(settings: WorkerSettings) -> Celery:
    """The worker's Celery app: the durability settings and the turn task."""
    global _settings
    _settings = settings
    for module in settings.imports:
        importlib.import_module(module)  # the workflows this worker runs (also imported on demand)
    app = make_app(settings.celery)
    app.task(name=TURN_TASK, ignore_result=True, acks_late=True, reject_on_worker_lost=True)(_turn)
    return app


def run_worker(
    settings: WorkerSettings,
    *,
    concurrency: int | None = None,
    pool: str = "threads",
    sweeper: bool = True,
    loglevel: str = "INFO",
    hostname: str | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> None:
    """Run a Celery worker for pyworkflow turns in this process (blocks until shutdown).
    ``concurrency`` defaults by pool: threads only wait for the process's turn loop, so 32 of them
    keep the database busy; prefork children each run a loop, one per CPU; solo runs one.
    ``metrics_port``: serve this process's metrics at ``http://metrics_host:port/metrics``."""
    if concurrency is None:
        concurrency = default_concurrency(pool)
    app = build_app(settings)
    sweep = Sweeper(settings) if sweeper else None
    if sweep is not None:
        sweep.start()
    stop_collecting = None
    if metrics_port is not None:
        metrics.PERMITS.set(concurrency)
        # The state gauges read the database through the sweeper's store, else the worker's.
        store = sweep.store if sweep is not None else current_worker().store
        stop_collecting = metrics.collect_store(store.database.read, store)
        port = metrics.start_metrics_server(metrics_port, metrics_host)
        log.info("metrics on http://%s:%d/metrics", metrics_host, port)
    argv = [
        "worker",
        f"--pool={pool}",
        f"--concurrency={concurrency}",
        f"--loglevel={loglevel}",
        f"--queues={settings.celery.queue}",
        f"--hostname={hostname or f'pyworkflow-{os.getpid()}@%h'}",
        "--without-gossip",
        "--without-mingle",
    ]
    try:
        app.worker_main(argv)
    finally:
        if stop_collecting is not None:
            stop_collecting()
        if sweep is not None:
            sweep.stop()
        if _worker is not None and _worker.pid == os.getpid():
            _worker.close()


def default_concurrency(pool: str) -> int:
    if pool == "solo":
        return 1
    if pool == "prefork":
        return os.cpu_count() or 1
    return 32


def run_sweeper(settings: WorkerSettings) -> None:
    """Run only the sweeper in this process until interrupted."""
    sweep = Sweeper(settings)
    try:
        sweep.run_forever()
    finally:
        sweep.stop()


_env_app: Celery | None = None


def __getattr__(name: str) -> Any:
    """``celery -A pyworkflow.runtime._celery_worker worker`` finds ``app`` here: built on first
    access, its settings from the environment (``PYWORKFLOW_STORAGE``, ``CELERY_BROKER_URL``, ...)."""
    global _env_app
    if name in ("app", "celery"):
        if _env_app is None:
            _env_app = build_app(settings_from_environment())
        return _env_app
    raise AttributeError(name)
