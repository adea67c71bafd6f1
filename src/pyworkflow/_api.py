"""The process-wide entry points: configure, start, inspect, resume, cancel, serve."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _clock, _serde, _tracing
from ._crashpoints import crashpoint
from ._engine import encode_input
from ._errors import ConfigurationError, HookNotFoundError, WorkflowNotFoundError
from ._ids import new_id
from ._waits import check_stored_schema, check_token, digest_token, encode_payload, validate_payload
from ._workflow import check_workflow_name, definition_of
from .runtime._local import LocalRuntime
from .store import (
    YOUNG_GC_THRESHOLD,
    Event,
    RunRecord,
    RunStatus,
    Store,
    WaitKind,
    WaitRecord,
    WaitStatus,
    check_gc_threshold,
    metrics,
    open_store,
    parse_age,
    parse_storage_url,
    sqlite_url,
    tracing,
)

log = logging.getLogger("pyworkflow")


def default_home() -> Path:
    return Path(os.environ.get("PYWORKFLOW_HOME") or Path.home() / ".pyworkflow")


@dataclass(slots=True)
class Settings:
    storage: str = ""
    runtime: str = "local"
    synchronous: str = "FULL"
    lease_ttl: float = 30.0
    poll_interval: float = 0.05
    max_concurrency: int = 1000
    max_crashes: int = 5
    extra: dict[str, Any] = field(default_factory=dict)
    retention: float | None = None
    gc_threshold: int | None = YOUNG_GC_THRESHOLD

    def storage_url(self) -> str:
        return (
            self.storage
            or os.environ.get("PYWORKFLOW_STORAGE")
            or sqlite_url(default_home() / "pyworkflow.db")
        )


_settings = Settings()
_store: Store | None = None
_runtime: LocalRuntime | None = None
_metrics_port: int | None = None


def configure(
    storage: str | None = None,
    *,
    runtime: str = "local",
    synchronous: str = "FULL",
    lease_ttl: float = 30.0,
    poll_interval: float = 0.05,
    max_concurrency: int = 1000,
    max_crashes: int = 5,
    retention: str | float | None = None,
    gc_threshold: int | None = YOUNG_GC_THRESHOLD,
    **extra: Any,
) -> None:
    """Choose where state lives and how runs execute. Call before the first ``start``.

    ``storage``: ``sqlite:///path.db``, ``sqlite:////abs/path.db``, a file path or
    ``postgresql://...`` (see :func:`pyworkflow.store.parse_storage_url`; default:
    ``$PYWORKFLOW_STORAGE`` or ``~/.pyworkflow/pyworkflow.db``, the folder from ``$PYWORKFLOW_HOME``).
    ``synchronous``: SQLite's durability level (FULL by default). ``poll_interval``: how often an
    idle local runtime looks for due work on SQLite (on PostgreSQL, whose notifications wake it,
    once a second or this if longer), and ``wait_for_run``'s pace. ``max_concurrency``: turns the
    local runtime runs at once (a run started or decided beyond it waits in the queue for a free
    permit, however many arrive together). ``max_crashes``: turns a run
    may lose to dead workers before it is failed. ``retention``: an age (``"30d"``, ``"12h"``, or
    seconds) after which the local runtime purges finished runs with their events, steps, waits
    and checkpoints (None, the default: every run is kept; the Celery runtime's sweeper takes
    ``pyworkflow worker --retention``). ``gc_threshold``: the garbage collector's young-generation
    threshold while the runtime runs (raised from CPython's 700, never lowered; the process's own
    comes back when it stops; None leaves the collector alone: see docs/operations.md)."""
    global _settings, _store
    if runtime not in ("local", "celery"):
        raise ConfigurationError(f"runtime must be 'local' or 'celery', not {runtime!r}")
    if runtime == "celery":
        from .runtime._celery import CeleryOptions

        CeleryOptions.from_extra(extra)  # broker=, queue=, visibility_timeout=: refuse bad ones now
    if not isinstance(synchronous, str) or synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ConfigurationError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
    for label, value in (("lease_ttl", lease_ttl), ("poll_interval", poll_interval)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
            raise ConfigurationError(f"{label} must be a positive number of seconds, not {value!r}")
    for label, count in (("max_concurrency", max_concurrency), ("max_crashes", max_crashes)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigurationError(f"{label} must be an int >= 1, not {count!r}")
    kept = None if retention is None else parse_age(retention, what="retention")
    check_gc_threshold(gc_threshold)
    if storage is not None:
        parse_storage_url(storage)  # refuse a location open_store cannot open now, not at the first start
    if runtime == "local" and extra:
        raise ConfigurationError(f"unknown option(s) for the local runtime: {', '.join(sorted(extra))}")
    if _runtime is not None and _runtime.running:
        raise ConfigurationError("pyworkflow is running; await shutdown() before configure()")
    new = Settings(storage or "", runtime, synchronous.upper(), float(lease_ttl), float(poll_interval),
                   max_concurrency, max_crashes, extra, kept, gc_threshold)  # fmt: skip
    if _store is not None and new.storage_url() != _settings.storage_url():
        _store.close()
        _store = None
    _settings = new
    # Tracing is decided again here: a tracer provider installed before configure() is used.
    tracing.reset()
    tracing.setup_from_env()


def get_store() -> Store:
    """The configured store, opened (and migrated) on first use."""
    global _store
    if _store is None:
        _store = open_store(_settings.storage_url(), synchronous=_settings.synchronous)
    return _store


async def get_runtime() -> LocalRuntime:
    """This process's local runtime, started on the running event loop."""
    global _runtime
    loop = asyncio.get_running_loop()
    if _runtime is None or _runtime.loop is not loop or not _runtime.running:
        if _runtime is not None and _runtime.loop is loop:
            await _runtime.stop()
        _runtime = LocalRuntime(
            get_store(),
            lease_ttl=_settings.lease_ttl,
            poll_interval=_settings.poll_interval,
            max_concurrency=_settings.max_concurrency,
            max_crashes=_settings.max_crashes,
            retention=_settings.retention,
            gc_threshold=_settings.gc_threshold,
        )
        await _runtime.start()
    return _runtime


async def start(workflow: Any, /, *args: Any, **kwargs: Any) -> str:
    """Start a run of a ``@workflow`` and return its id once the run is durably recorded. With
    the local runtime its first turn begins at once in this event loop."""
    defn = definition_of(workflow)
    run_id = new_id()
    with _tracing.started(run_id, defn.name) as trace:
        data = encode_input(args, kwargs, defn.module, trace)  # the one encoding: start_by_name's
        log.info("run %s: started (%s)", run_id, defn.name, extra={"run_id": run_id})
        if _settings.runtime == "celery":
            from .runtime import _celery

            await _celery.submit(get_store(), run_id, defn.name, data, _settings.extra)
            return run_id
        runtime = await get_runtime()
        await runtime.submit(run_id, defn.name, data)
    return run_id


async def start_by_name(
    store: Store,
    name: str,
    kwargs: dict[str, Any] | None = None,
    *,
    also: Callable[[Any, str], None] | None = None,
) -> str:
    """Start a run of the workflow registered as ``name`` with keyword arguments ``kwargs``
    without importing it (Temporal's start by workflow type): the run is recorded in ``store``,
    due now and held by nobody, for whichever runtime serves that database and has ``name``
    registered (the local runtime polls for it; the Celery runtime's sweeper publishes it; on
    the store ``configure`` chose, this process's runtime is told at once, as ``start`` does).
    Returns its id once the run is durably recorded.

    The input is encoded as :func:`start` encodes it, naming no module: a serving process that
    has not registered ``name`` fails the run with ``WorkflowNotFoundError`` (saying what to
    do), instead of importing whatever module a caller names. Refused before anything is
    written: a name ``@workflow(name=...)`` would refuse (``ConfigurationError``), ``kwargs``
    that is not a dict of str keys (``ConfigurationError``), or that is not JSON, holds a number
    JSON would not keep exactly, or is more than ``MAX_INPUT_BYTES`` (1 MiB) serialized
    (``SerializationError``). ``also(conn, run_id)`` runs in the run's transaction (an audit
    entry of whoever started it)."""
    check_workflow_name(name)
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ConfigurationError(f"kwargs must be a dict with str keys, not {kwargs!r:.80}")
    run_id = new_id()
    with _tracing.started(run_id, name) as trace:
        data = encode_input((), kwargs, None, trace)
        await store.create_run(
            run_id,
            name,
            data,
            now=_clock.now(),
            lease_owner=None,
            lease_ttl=0.0,
            also=None if also is None else lambda conn: also(conn, run_id),
        )
    log.info("run %s: started by name (%s)", run_id, name, extra={"run_id": run_id})
    if store is _store:
        _wake_runtime(run_id)  # this process's runtime serves the store: publish it or look now
    return run_id


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """A run as stored, with its result and error decoded."""

    run_id: str
    workflow_name: str
    status: RunStatus
    input: Any
    result: Any
    error: dict[str, Any] | None
    created_at: float
    updated_at: float
    finished_at: float | None

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    @classmethod
    def from_record(cls, record: RunRecord) -> WorkflowRun:
        info = _serde.loads(record.input) or {}
        return cls(
            record.id,
            record.workflow,
            record.status,
            {"args": info.get("args", []), "kwargs": info.get("kwargs", {})},
            _serde.loads(record.result),
            _serde.loads(record.error),
            record.created_at,
            record.updated_at,
            record.finished_at,
        )


@dataclass(frozen=True, slots=True)
class WorkflowEvent:
    run_id: str
    seq: int
    at: float
    type: str
    key: str | None
    data: Any

    @classmethod
    def from_record(cls, event: Event) -> WorkflowEvent:
        return cls(event.run_id, event.seq, event.at, event.type, event.key, _serde.loads(event.data))


@dataclass(frozen=True, slots=True)
class ResumeResult:
    run_id: str
    hook_id: str
    hook_name: str
    status: WaitStatus


@dataclass(frozen=True, slots=True)
class PendingHook:
    """A wait listed for an inbox: hooks and step hooks that still expect a payload."""

    hook_id: str
    run_id: str
    kind: str
    name: str
    step_key: str
    created_at: float
    expires_at: float | None

    @classmethod
    def from_record(cls, w: WaitRecord) -> PendingHook:
        return cls(w.id, w.run_id, w.kind.value, w.name, w.step_key, w.created_at, w.expires_at)


def _check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or not run_id or len(run_id) > 200:
        raise WorkflowNotFoundError(f"no run {run_id!r}")
    return run_id


async def get_workflow_run(run_id: str) -> WorkflowRun:
    """The run's current state; ``WorkflowNotFoundError`` for an unknown id."""
    record = await get_store().get_run(_check_run_id(run_id))
    if record is None:
        raise WorkflowNotFoundError(f"no run {run_id!r}")
    return WorkflowRun.from_record(record)


async def get_workflow_events(run_id: str) -> list[WorkflowEvent]:
    """The run's history, oldest first."""
    await get_workflow_run(run_id)
    return [WorkflowEvent.from_record(e) for e in await get_store().get_events(run_id)]


async def list_runs(
    *,
    status: RunStatus | str | None = None,
    workflow: Any = None,
    limit: int = 100,
    after: str | None = None,
) -> list[WorkflowRun]:
    """Runs in the store, newest first: ``status`` (a :class:`RunStatus` or its name),
    ``workflow`` (a ``@workflow`` function or its registered name), at most ``limit`` (1 to
    1000). Cursor-paged: pass the last run's id of a page as ``after`` for the next one; a page
    shorter than ``limit`` is the last. Every run in the store is listed, an atfgraph traverser's
    too (its workflow name is its ``node.skill`` target). Bad arguments raise
    ``ConfigurationError``; an ``after`` that names no run raises ``WorkflowNotFoundError``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ConfigurationError(f"limit must be an int from 1 to 1000, not {limit!r}")
    wanted: RunStatus | None = None
    if status is not None:
        try:
            wanted = RunStatus(status)
        except ValueError:
            names = ", ".join(s.value for s in RunStatus)
            raise ConfigurationError(f"status must be one of {names}, not {status!r}") from None
    name: str | None = None
    if workflow is not None:
        name = workflow if isinstance(workflow, str) else definition_of(workflow).name
        if not name or len(name) > 1000:
            raise ConfigurationError(f"workflow must name a workflow, not {workflow!r}")
    if after is not None:
        _check_run_id(after)
    records = await get_store().list_runs(status=wanted, workflow=name, limit=limit, after=after)
    return [WorkflowRun.from_record(r) for r in records]


async def cancel_workflow(run_id: str, reason: str | None = None) -> bool:
    """Cancel a run that has not finished (its pending hooks are cancelled); False if it had.
    ``reason`` (at most 1000 characters) is kept as the run's error."""
    if reason is not None and (not isinstance(reason, str) or len(reason) > 1000):
        raise ConfigurationError(f"reason must be a str of at most 1000 characters, not {reason!r:.80}")
    cancelled = await get_store().cancel_run(_check_run_id(run_id), now=_clock.now(), reason=reason)
    if _runtime is not None and _runtime.running:
        _runtime.wake()
    return cancelled


async def retry_workflow(run_id: str) -> bool:
    """A new attempt of a failed run (DBOS ``resume``, Prefect's retry): its completed steps are
    replayed, the step that failed runs again, and it continues from there. False (and nothing
    changed) unless the run had failed; ``WorkflowNotFoundError`` for an unknown run. The run is
    executed by whichever runtime serves the store (this process's, once started)."""
    outcome = await get_store().retry_run(_check_run_id(run_id), now=_clock.now())
    if outcome == "ok":
        _wake_runtime(run_id)
    return outcome == "ok"


async def resume_hook(token: str, payload: Any = None) -> ResumeResult:
    """Deliver ``payload`` to the hook ``token`` names and schedule its run.

    Recorded (durably) before the run is scheduled, so it is not lost even if it arrives before
    the step has suspended. Raises ``InvalidTokenError``, ``HookNotFoundError``,
    ``HookExpiredError``, ``HookAlreadyReceivedError``, ``HookCancelledError``,
    ``PayloadValidationError`` (the hook's ``payload_schema``; more than ``MAX_PAYLOAD_BYTES``, 1
    MiB, serialized; nested deeper than 64 levels) or ``SerializationError`` (not JSON, or a
    number JSON would not keep exactly) and changes nothing (an expired hook is recorded as
    expired)."""
    began = _clock.now()
    digest = digest_token(check_token(token))
    data = encode_payload(payload)
    store = get_store()
    runtime = _runtime_here()
    # A permit of this process's runtime is held from before the decision until its claim has a
    # task, so a burst of decisions takes no more turns than the runtime has room for.
    with runtime.permits(1) if runtime is not None else contextlib.nullcontext(0) as granted:
        claim = None
        if runtime is not None and granted:
            # This process's runtime takes the resumed turn: claimed in the decision's transaction
            # (as a new run's first turn is in its creation), not by a later poll with a commit of
            # its own.
            resolved, claim = await store.resolve_wait_and_claim(
                token_digest=digest,
                payload=data,
                now=_clock.now(),
                check=lambda wait: check_stored_schema(wait, data),
                owner=runtime.owner,
                lease_ttl=runtime.lease_ttl,
                max_crashes=runtime.max_crashes,
                abandoned=runtime.abandoned,
            )
        else:
            resolved = await store.resolve_wait(
                token_digest=digest,
                payload=data,
                now=_clock.now(),
                check=lambda wait: check_stored_schema(wait, data),
            )
        crashpoint("after_hook_resumed")
        _log_received(resolved)
        try:
            span = await _tracing.decided(get_store(), resolved, began)
        except asyncio.CancelledError:  # the decision and its claim are committed: run the turn
            if claim is not None and runtime is not None:
                runtime.adopt(claim)
            raise
        with span:
            if claim is not None and runtime is not None:
                runtime.adopt(claim)
            else:
                _wake_runtime(resolved.run_id)
    return ResumeResult(resolved.run_id, resolved.id, resolved.name, resolved.status)


def _runtime_here() -> LocalRuntime | None:
    """This process's local runtime when it runs on the calling event loop (else None)."""
    if _settings.runtime != "local" or _runtime is None or not _runtime.running:
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return _runtime if _runtime.loop is loop else None


async def resume_hook_by_id(hook_id: str, payload: Any = None) -> ResumeResult:
    """Like :func:`resume_hook`, addressed by hook id: for operators' inboxes (console, CLI),
    which authorize the caller themselves instead of holding the token. The same errors, but
    ``HookNotFoundError`` instead of ``InvalidTokenError`` for an id that names no hook."""
    if not isinstance(hook_id, str) or not hook_id or len(hook_id) > 200:
        raise HookNotFoundError(f"no hook {hook_id!r}")
    store = get_store()
    wait = await store.get_wait(hook_id)
    data = validate_payload(wait, payload) if wait is not None else b"null"
    began = _clock.now()
    resolved = await store.resolve_wait(wait_id=hook_id, payload=data, now=began)
    crashpoint("after_hook_resumed")
    _log_received(resolved)
    with await _tracing.decided(store, resolved, began):
        _wake_runtime(resolved.run_id)
    return ResumeResult(resolved.run_id, resolved.id, resolved.name, resolved.status)


async def list_pending_hooks(limit: int = 100) -> list[PendingHook]:
    """Hooks and step hooks waiting for a payload, oldest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be an int >= 0, not {limit!r}")
    waits = await get_store().list_waits(
        status=WaitStatus.PENDING, kinds=(WaitKind.HOOK, WaitKind.STEP_HOOK), limit=limit
    )
    return [PendingHook.from_record(w) for w in waits]


def _log_received(wait: WaitRecord) -> None:
    log.info(
        "run %s: hook %s received", wait.run_id, wait.name, extra={"run_id": wait.run_id, "wait_id": wait.id}
    )


def _wake_runtime(run_id: str) -> None:
    """Schedule the run a decision was just recorded for: publish its turn (Celery) or wake this
    process's local runtime."""
    if _settings.runtime == "celery":
        from .runtime import _celery

        _celery.wake(run_id, _settings.extra)
        return
    if _runtime is not None and _runtime.running and _runtime.loop is not None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is _runtime.loop:
            _runtime.wake()
        else:
            _runtime.loop.call_soon_threadsafe(_runtime.wake)


_TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
#: ``wait_for_run``'s pause between two reads of a run grows from ``poll_interval`` (doubling) to
#: this: a caller waiting hours for a decision on a run served elsewhere reads it once a second,
#: not 20 times (DBOS's result handles poll once a second too).
WAIT_PAUSE_MAX = 1.0


async def wait_for_run(
    run_id: str, timeout: float | None = None, *, until: tuple[str, ...] | None = None
) -> WorkflowRun:
    """Wait until the run is terminal (or reaches one of ``until``) and return it; raises
    ``TimeoutError`` after ``timeout`` seconds. A run whose turns this process's runtime runs is
    looked at again as each of its turns ends; otherwise it is read every ``poll_interval`` at
    first, then less and less often, down to once a second (:data:`WAIT_PAUSE_MAX`)."""
    try:
        wanted = {RunStatus(s) for s in until} if until else set(_TERMINAL)
    except ValueError:
        raise ConfigurationError(f"until must name run statuses, not {until!r}") from None
    _check_run_id(run_id)  # before it keys anything (a bad id is WorkflowNotFoundError)
    deadline = None if timeout is None else time.monotonic() + timeout
    step = _settings.poll_interval
    longest = max(_settings.poll_interval, WAIT_PAUSE_MAX)
    first = RunStatus.RUNNING not in wanted
    while True:
        rt = _runtime
        here = rt is not None and rt.running and rt.loop is asyncio.get_running_loop()
        with rt.watching(run_id) if here and rt is not None else contextlib.nullcontext() as changed:
            # Watched before the read, so a turn of the run that ends during it is not missed.
            # The first look at a run in a turn here (just started or resumed by this process)
            # waits for that turn's end instead of reading: until then the run is running.
            skip = first and rt is not None and changed is not None and rt.in_turn(run_id)
            first = False
            run = None if skip else await get_workflow_run(run_id)
            if run is not None and (run.status in wanted or (until is None and run.is_terminal)):
                return run
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                status = RunStatus.RUNNING if run is None else run.status
                raise TimeoutError(f"run {run_id} is still {status} after {timeout} s")
            if changed is not None:  # a turn ending here sets it; the timeout is for turns run elsewhere
                pause = min(step * 4, longest)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(
                        max(pause if remaining is None else min(pause, remaining), 0.001)
                    ):
                        await changed.wait()
            else:
                await asyncio.sleep(max(step if remaining is None else min(step, remaining), 0.001))
        step = min(step * 2, longest)


async def serve() -> None:
    """Run the local runtime in this process until cancelled: executes runs started or resumed
    anywhere on the same store, fires due timers and hook deadlines, recovers runs whose process
    died. It logs (logger ``pyworkflow``; on stderr at INFO unless the program configured
    logging) each turn it runs, how it ended, and why a run failed."""
    _log_to_stderr()
    await get_runtime()
    log.info(
        "serving runs stored in %s (process %d); Ctrl-C stops",
        parse_storage_url(_settings.storage_url()).redacted(),
        os.getpid(),
    )
    try:
        await asyncio.Event().wait()
    finally:
        log.info("stopped serving")
        await shutdown()


def _log_to_stderr() -> None:
    """``serve()`` is a program's main loop: show its log unless the program set up logging."""
    logger = logging.getLogger("pyworkflow")
    if logging.getLogger().handlers or logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


async def shutdown() -> None:
    """Stop the local runtime (active turns are released for another process) and close the store."""
    global _runtime, _store
    if _runtime is not None:
        await _runtime.stop()
        _runtime = None
    if _store is not None:
        _store.close()
        _store = None


def start_metrics_server(port: int = 0, host: str = "127.0.0.1") -> int:
    """Opt in to metrics for this process: serve them in Prometheus text format at
    ``http://host:port/metrics`` (no authentication: bind where only your scraper reaches). They
    are this process's turns, steps, retries, crashes, timers and group commits, and the runs and
    pending waits of the configured store (read at scrape time). ``port=0`` picks a free port;
    returns the port. Once per process: a second call returns the first one's port."""
    global _metrics_port
    if _metrics_port is None:
        metrics.collect_store(_read_open_store, _read_open_store)
        _metrics_port = metrics.start_metrics_server(port, host)
    return _metrics_port


def _read_open_store(fn: Any) -> Any:
    """A scrape's read of the store this process has open (none open: the scrape reports
    ``pyworkflow_store_up 0`` rather than opening one)."""
    if _store is None:
        raise ConfigurationError("no store is open in this process")
    return _store.database.read(fn)
