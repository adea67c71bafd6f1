"""The Celery runtime: a workflow turn is one short Celery task.

The store stays the source of truth; Celery only carries "run X may have work" messages:

- ``start()`` records the run (unleased, due now) and publishes a turn message;
  ``resume_hook()`` records the payload and wakes the run in one transaction, then publishes.
- A worker's turn task claims *that* run's queue row with a lease (``claim_run``), runs
  :func:`~pyworkflow._engine.execute_turn` and returns. A run that suspends holds no worker
  slot, thread or message: it is a few rows until something wakes it.
- A message for a run that is not due (a duplicate delivery, a run another worker holds, a
  finished run) claims nothing and does nothing; a second completion of a step is refused by the
  store. So Celery's at-least-once delivery is enough.
- Timers and hook deadlines live in the store. A sweeper (a thread of every ``pyworkflow worker``,
  or ``pyworkflow sweeper`` alone) expires due waits, frees the leases of dead workers and
  re-publishes turns for runs that are due but whose message was lost or whose worker died.

Messages are JSON and carry only a run id: no workflow data, no secrets, nothing to unpickle
(and, when tracing is on, the publisher's W3C ``traceparent`` in their headers).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from celery import Celery  # type: ignore[import-untyped]

from .. import _clock
from .._errors import ConfigurationError
from ..store import Claim, Store, tracing

log = logging.getLogger("pyworkflow.celery")

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_QUEUE = "pyworkflow"
#: Redis/SQS redeliver an unacknowledged message after this long: keep it longer than your
#: longest step (a redelivery is harmless, but wasted). One hour by default, like Celery's.
DEFAULT_VISIBILITY_TIMEOUT = 3600.0
#: A due run the sweeper finds unclaimed this long after it became due, with no message in the
#: broker's queue standing for it, is published again (its message was lost between the commit
#: and the broker: a process that died there). Lost messages are rare, and a short grace only
#: costs duplicate turns (fenced, so harmless) while workers are slow to take a backlog.
DEFAULT_DISPATCH_GRACE = 30.0
MIN_DISPATCH_GRACE, MAX_DISPATCH_GRACE = 1.0, 86_400.0
TURN_TASK = "pyworkflow.turn"


class CeleryStore(Store, Protocol):
    """What the Celery runtime needs beyond :class:`~pyworkflow.store.Store` (PostgreSQL has it)."""

    async def claim_run(
        self, run_id: str, owner: str, *, now: float, lease_ttl: float, max_crashes: int
    ) -> Claim | None: ...

    async def ready_runs(
        self,
        *,
        now: float,
        due_before: float | None = None,
        due_after: float | None = None,
        limit: int = 1000,
    ) -> list[tuple[str, int, float]]: ...

    async def count_ready(self, *, now: float, limit: int) -> int: ...

    async def next_wake(self) -> tuple[float | None, float | None]: ...


def celery_store(store: Store) -> CeleryStore:
    if not (hasattr(store, "claim_run") and hasattr(store, "ready_runs")):
        raise ConfigurationError(
            f"the Celery runtime needs PostgreSQL storage (postgresql://...), not {type(store).__name__}"
        )
    return store  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class CeleryOptions:
    """The Celery part of ``configure(runtime="celery", broker=..., queue=..., visibility_timeout=...)``."""

    broker: str
    queue: str = DEFAULT_QUEUE
    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> CeleryOptions:
        """From ``configure()``'s extra keyword arguments; the broker defaults to
        ``$CELERY_BROKER_URL``, then to Redis on localhost."""
        broker = extra.get("broker") or os.environ.get("CELERY_BROKER_URL") or DEFAULT_BROKER
        queue = extra.get("queue") or DEFAULT_QUEUE
        visibility = extra.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT)
        if not isinstance(broker, str) or "://" not in broker:
            raise ConfigurationError(f"broker must be a URL such as redis://host:6379/0, not {broker!r}")
        if not isinstance(queue, str) or not queue.strip():
            raise ConfigurationError(f"queue must be a non-empty string, not {queue!r}")
        if isinstance(visibility, bool) or not isinstance(visibility, int | float) or visibility <= 0:
            raise ConfigurationError(f"visibility_timeout must be a positive number, not {visibility!r}")
        return cls(broker, queue, float(visibility))


def make_app(options: CeleryOptions) -> Celery:
    """A Celery app with the durability settings pyworkflow relies on (no task registered: the
    worker registers the turn task, senders only need its name)."""
    app = Celery("pyworkflow", broker=options.broker, set_as_current=False)
    app.conf.update(
        # The broker asked for, even where $CELERY_BROKER_URL names another: Celery prefers that
        # variable to its app's own broker_url, but not to the read and write URLs.
        broker_read_url=options.broker,
        broker_write_url=options.broker,
        # A message is acknowledged only after its turn ran, and put back if the worker process
        # died running it: the turn is retried, and the store makes the retry harmless.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message per worker slot at a time: a busy worker does not sit on others' turns.
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": options.visibility_timeout},
        task_default_queue=options.queue,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        # Warm shutdown waits for running turns; soft shutdown bounds that wait (Celery >= 5.5).
        worker_soft_shutdown_timeout=10.0,
        worker_enable_soft_shutdown_on_idle=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app


_apps: dict[CeleryOptions, Celery] = {}
_apps_lock = threading.Lock()


def app_for(options: CeleryOptions) -> Celery:
    """This process's sending app for ``options`` (one producer pool per broker)."""
    with _apps_lock:
        app = _apps.get(options)
        if app is None:
            app = _apps[options] = make_app(options)
        return app


def dispatch(run_ids: Iterable[str], options: CeleryOptions, *, app: Celery | None = None) -> int:
    """Publish one turn message per run. Returns how many were published; a broker error is
    logged, not raised: the run is due in the store and the sweeper publishes it again."""
    app = app or app_for(options)
    # The span publishing (a start, a decision) rides in the message's headers, W3C names: the
    # turn it wakes links to it.
    headers = tracing.carrier() if tracing.enabled() else None
    sent = 0
    try:
        for run_id in run_ids:
            app.send_task(TURN_TASK, args=[run_id], queue=options.queue, headers=headers or None)
            sent += 1
    except Exception as exc:
        log.warning("could not publish a turn (%s); the sweeper will publish it again", exc)
    return sent


class QueueDepth:
    """Turn messages ready in the broker's queue (published, not yet handed to a worker), read
    over one broker connection kept from one read to the next (the sweeper reads it every sweep
    while a backlog lasts). A read that fails closes the connection, the next opens another; a
    queue the broker does not have is no failure (the channel RabbitMQ closes for it, py-amqp
    opens again on the same connection)."""

    def __init__(self, options: CeleryOptions, *, app: Celery | None = None) -> None:
        self.options = options
        self._app = app or app_for(options)
        self._conn: Any = None

    def read(self) -> int | None:
        """0 for a queue the broker does not have (Redis drops an empty one); None when the broker
        cannot be asked (it is down: the caller decides as if it could not tell)."""
        try:
            if self._conn is None:
                self._conn = self._app.connection_for_read()
                self._conn.ensure_connection(max_retries=1)
            declared = self._conn.default_channel.queue_declare(queue=self.options.queue, passive=True)
            return int(declared.message_count)
        except Exception as exc:
            if str(getattr(exc, "reply_code", "")) == "404":  # no such queue (kombu's Redis says "404")
                return 0
            self.close()
            log.warning("could not read the broker queue's depth (%s)", exc)
            return None

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.release()


def queue_depth(options: CeleryOptions, *, app: Celery | None = None) -> int | None:
    """One read of :class:`QueueDepth` on a connection of its own."""
    depth = QueueDepth(options, app=app)
    try:
        return depth.read()
    finally:
        depth.close()


async def submit(store: Store, run_id: str, workflow: str, input: bytes, extra: Mapping[str, Any]) -> None:
    """``start()`` with the Celery runtime: record the run, due now, then publish its first turn."""
    options = CeleryOptions.from_extra(extra)
    celery_store(store)
    await store.create_run(run_id, workflow, input, now=_clock.now(), lease_owner=None, lease_ttl=0.0)
    dispatch([run_id], options)


def wake(run_id: str, extra: Mapping[str, Any]) -> None:
    """After ``resume_hook`` recorded a decision: publish the run's next turn."""
    dispatch([run_id], CeleryOptions.from_extra(extra))
