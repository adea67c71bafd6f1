"""The metrics of both faces, defined once, on one registry per process (:data:`REGISTRY`).

Two kinds, as the docs' metrics reference lists them (docs/operations.md, "Metrics reference",
which tests/unit/test_metrics_reference.py keeps complete):

- **state** is read from the database at scrape time by :class:`StoreCollector` (runs by status
  and kind, pending waits by kind and the age of the oldest): two indexed ``GROUP BY`` reads,
  cached for :data:`STATE_CACHE_SECONDS`, so every process that serves this database reports
  the same numbers and nothing is counted in memory that a restart would lose;
- **events** are counters and histograms of this process (turns, steps, retries, crashes, lease
  expiries, timers fired, decisions reaching a running attempt, group commits, HTTP requests,
  permits in use), observed where the event happens, once per event, never per statement.

Serve them with :func:`metrics_text` (the graph server's ``GET /metrics``) or
:func:`start_metrics_server` (``pyworkflow worker --metrics-port``, the local runtime's opt-in,
the graph server's ``--metrics-bind``).
"""

from __future__ import annotations

import bisect
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ._histograms import LabelledHistogram, histogram_family

log = logging.getLogger("pyworkflow.metrics")

#: This process's metrics (a registry of its own: nothing a library registers globally leaks in).
REGISTRY = CollectorRegistry()
# The process itself, as Prometheus's clients report it everywhere: CPU, memory, file descriptors
# (process_*), the interpreter (python_info) and its garbage collector's passes and objects
# (python_gc_*: docs/operations.md, "The garbage collector's pace"). Read at scrape time.
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

#: The content type of :func:`metrics_text` (Prometheus text format).
CONTENT_TYPE = CONTENT_TYPE_LATEST

#: Seconds a scrape reuses the previous scrape's database reads.
STATE_CACHE_SECONDS = 1.0
#: Seconds a scrape waits for the database before it reports ``pyworkflow_store_up 0``.
READ_TIMEOUT = 10.0

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_DURATION = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 1800.0, 3600.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

# -- events --------------------------------------------------------------------------------------

DECISION_TO_RUNNING = LabelledHistogram(
    "pyworkflow_decision_to_running_seconds",
    "From a wait's resolution (a decision, a hook payload) to the start of the attempt that runs on.",
    ["kind"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
ATTEMPT_SECONDS = LabelledHistogram(
    "pyworkflow_attempt_seconds",
    "Duration of an attempt: a turn of a pyworkflow run, or a traverser's lease from claim to its end.",
    ["kind", "outcome"],
    buckets=_DURATION,
    registry=REGISTRY,
)
STEP_SECONDS = LabelledHistogram(
    "pyworkflow_step_seconds",
    "Duration of one execution of a step function (one attempt of the step).",
    ["outcome"],
    buckets=_DURATION,
    registry=REGISTRY,
)
RETRIES = Counter(
    "pyworkflow_retries",
    "Retries scheduled: a step's back-off, a traverser queued again after a retryable failure.",
    ["kind"],
    registry=REGISTRY,
)
CRASHES = Counter(
    "pyworkflow_crashes",
    "Turns that crashed in this process (not the workflow's failure: the runtime's).",
    ["kind"],
    registry=REGISTRY,
)
LEASE_EXPIRIES = Counter(
    "pyworkflow_lease_expiries",
    "Leases taken back from a dead or hung owner (a worker's lease ran out, a dead process's freed).",
    ["kind"],
    registry=REGISTRY,
)
TURNS_REPUBLISHED = Counter(
    "pyworkflow_turns_republished",
    "Turns the Celery sweeper published again for runs due and unclaimed past its grace that no"
    " message in the broker's queue stood for (a message lost, a dead worker's run).",
    registry=REGISTRY,
)
QUEUE_VACUUMS = Counter(
    "pyworkflow_queue_vacuums",
    "Vacuums of the run queue this process started on PostgreSQL (store/_pg_vacuum.py), by outcome:"
    " vacuumed, skipped (another vacuum held the table), refused (the role may not), failed.",
    ["outcome"],
    registry=REGISTRY,
)
TIMERS_FIRED = Counter(
    "pyworkflow_timers_fired",
    "Waits that expired and were acted on: durable sleeps, retry back-offs, hook and approval timeouts.",
    ["kind"],
    registry=REGISTRY,
)
TIMER_LATENESS = LabelledHistogram(
    "pyworkflow_timer_lateness_seconds",
    "From a wait's deadline to the start of the attempt that acts on its expiry.",
    ["kind"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
PERMITS_IN_USE = Gauge(
    "pyworkflow_worker_permits_in_use",
    "Turns this process is running now (of pyworkflow_worker_permits).",
    registry=REGISTRY,
)
#: The turns in flight of each runtime of this process (a local runtime, a Celery worker), summed
#: at scrape time into PERMITS_IN_USE: nothing is counted a turn (see :func:`count_in_use`).
_in_use: dict[object, Callable[[], int]] = {}
_in_use_lock = threading.Lock()


def count_in_use(count: Callable[[], int]) -> Callable[[], None]:
    """Report ``count()``, a runtime's turns in flight, in ``pyworkflow_worker_permits_in_use``
    until the function returned is called. ``count`` is called on the scraping thread: it must
    only read (the size of a set, an int)."""
    key = object()
    with _in_use_lock:
        _in_use[key] = count

    def forget() -> None:
        with _in_use_lock:
            _in_use.pop(key, None)

    return forget


def _permits_in_use() -> float:
    with _in_use_lock:
        counts = list(_in_use.values())
    return float(sum(count() for count in counts))


PERMITS_IN_USE.set_function(_permits_in_use)
PERMITS = Gauge(
    "pyworkflow_worker_permits",
    "Turns this process may run at once.",
    registry=REGISTRY,
)
HTTP_SECONDS = Histogram(
    "atfgraph_http_request_duration_seconds",
    "Graph server HTTP requests by method, route template (not the raw path) and status.",
    ["method", "route", "status"],
    buckets=_LATENCY,
    registry=REGISTRY,
)


class WriterBatches(Collector):
    """``pyworkflow_group_commit_batch_size`` and ``pyworkflow_group_commit_seconds``: each
    batch a writer commits (both dialects, the writer thread's and those run inline on their
    caller's thread), observed once with :meth:`observe`. A writer observes every commit, four or
    five a run one at a time, and two :class:`Histogram` observations there cost four locked
    increments; this takes one lock and keeps plain counts, served at scrape time as the same two
    histograms, sample for sample (tests/unit/test_metrics_local.py compares them)."""

    SIZE = "pyworkflow_group_commit_batch_size"
    SECONDS = "pyworkflow_group_commit_seconds"
    SIZE_DOC = "Jobs (transitions, statements) a writer took at once and committed together."
    SECONDS_DOC = "Time a writer spent on one batch: executing its jobs and committing them."

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._created = time.time()
        self._sizes = [0] * (len(_BATCH) + 1)  # per bucket, not cumulative; the last is +Inf
        self._size_sum = 0
        self._seconds = [0] * (len(_LATENCY) + 1)
        self._seconds_sum = 0.0

    def observe(self, seconds: float, jobs: int) -> None:
        """One batch of ``jobs`` jobs that took ``seconds`` (a value goes in the first bucket
        whose bound it does not exceed, as Prometheus's ``le``)."""
        with self._lock:
            self._sizes[bisect.bisect_left(_BATCH, jobs)] += 1
            self._size_sum += jobs
            self._seconds[bisect.bisect_left(_LATENCY, seconds)] += 1
            self._seconds_sum += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            sizes, size_sum = list(self._sizes), float(self._size_sum)
            seconds, seconds_sum = list(self._seconds), self._seconds_sum
        yield histogram_family(self.SIZE, self.SIZE_DOC, (), _BATCH, [((), sizes, size_sum, self._created)])
        yield histogram_family(
            self.SECONDS, self.SECONDS_DOC, (), _LATENCY, [((), seconds, seconds_sum, self._created)]
        )


#: The writers' batches (:class:`WriterBatches`), on :data:`REGISTRY`.
GROUP_COMMITS = WriterBatches()
REGISTRY.register(GROUP_COMMITS)


@functools.cache
def labelled(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, kept: how every labelled metric here is observed. Where an
    event is observed once per turn or step, finding the child by its label values
    (prometheus-client checks them and takes a lock each time) cost as much as the observation
    itself. A metric keeps every child it made, so this keeps no more than it does (nothing here
    removes a child from a metric)."""
    return metric.labels(*values)


#: Wait kinds whose resolution is a decision or a payload (the rest resolve by expiring).
DECIDED_KINDS = frozenset({"hook", "step_hook", "approval"})


def observe_continuation(
    waits: Iterable[tuple[str, str, float, float | None, float | None]], now: float
) -> None:
    """Observe what a new attempt continues from, given its run's waits as ``(kind, status,
    created_at, expires_at, resolved_at)``: the wait resolved last, if nothing was created after
    its resolution (so this is the first attempt since: later ones find a newer wait). Received
    (a decision, a payload): ``pyworkflow_decision_to_running_seconds``; expired: a timer fired,
    with its lateness. An attempt that crashes and runs again may observe it twice."""
    newest_created = 0.0
    last: tuple[str, str, float, float | None, float | None] | None = None
    for wait in waits:
        newest_created = max(newest_created, wait[2])
        resolved = wait[4]
        fresher = last is None or (resolved or 0.0) >= (last[4] or 0.0)
        if resolved is not None and wait[1] in ("received", "expired") and fresher:
            last = wait
    if last is None or (last[4] or 0.0) < newest_created:
        return
    kind, status, _, expires_at, resolved_at = last
    if status == "received":
        labelled(DECISION_TO_RUNNING, kind).observe(max(0.0, now - (resolved_at or now)))
    elif expires_at is not None:
        labelled(TIMERS_FIRED, kind).inc()
        labelled(TIMER_LATENESS, kind).observe(max(0.0, now - expires_at))


# -- state, read at scrape time ----------------------------------------------------------------

# Runs by status (runs_by_status), and the traversers among them (runs_remote_by_status, a
# partial index of the runs with a node_id: pyworkflow migration 0004 SQLite / 0009 PostgreSQL):
# both dialects count from the indexes alone; a status's workflow runs are the difference.
SQL_RUNS_BY_STATUS = """
SELECT status, count(*), 0 FROM runs GROUP BY status
UNION ALL
SELECT status, 0, count(*) FROM runs WHERE node_id IS NOT NULL GROUP BY status
"""
# Pending waits by kind and the oldest one's creation: waits_pending_by_kind (the same migration),
# a partial index of the pending ones only.
SQL_PENDING_WAITS = "SELECT kind, count(*), min(created_at) FROM waits WHERE status = 'pending' GROUP BY kind"

State = tuple[list[tuple[str, str, int]], list[tuple[str, int, float]], float]


def read_state(conn: Any) -> State:
    """One snapshot of the state gauges on a kit database connection (either dialect)."""
    totals: dict[str, list[int]] = {}
    for status, every, remote in conn.execute(SQL_RUNS_BY_STATUS).fetchall():
        counts = totals.setdefault(str(status), [0, 0])
        counts[0] += int(every)
        counts[1] += int(remote)
    runs = [
        (status, kind, count)
        for status, (every, remote) in totals.items()
        for kind, count in (("workflow", every - remote), ("traverser", remote))
        if count
    ]
    waits = [
        (str(kind), int(count), float(oldest))
        for kind, count, oldest in conn.execute(SQL_PENDING_WAITS).fetchall()
    ]
    return runs, waits, time.time()


def _first_line(exc: BaseException) -> str:
    return ((str(exc) or type(exc).__name__).splitlines() or [""])[0][:300]


class StoreCollector(Collector):
    """The state gauges of one database, read at scrape time with ``read(fn)`` (a kit database's
    :meth:`read`: one snapshot) and cached for :data:`STATE_CACHE_SECONDS`. A failed read is
    logged and reported as ``pyworkflow_store_up 0``; the scrape still answers."""

    def __init__(self, read: Callable[[Callable[[Any], State]], State]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._cached: State | None = None
        self._at = 0.0
        self._down = False
        # Reads run on one thread of their own: a kit database keeps a reader connection per
        # thread, and an HTTP server may answer each scrape on a new thread.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pyworkflow-metrics")

    def close(self) -> None:
        self._thread.shutdown(wait=False)

    def _state(self) -> State | None:
        with self._lock:
            if self._cached is None or time.monotonic() - self._at >= STATE_CACHE_SECONDS:
                try:
                    self._cached = self._thread.submit(self._read, read_state).result(READ_TIMEOUT)
                except Exception as exc:  # a scrape must answer while the database is away
                    if not self._down:  # once per outage, not once per scrape
                        log.warning("metrics: cannot read the database: %s", _first_line(exc))
                    self._down = True
                    self._cached = None
                    return None
                self._down = False
                self._at = time.monotonic()
            return self._cached

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._state()
        up = GaugeMetricFamily("pyworkflow_store_up", "Whether the last read of the database succeeded.")
        up.add_metric([], 0.0 if state is None else 1.0)
        yield up
        if state is None:
            return
        runs, waits, at = state
        by_status = GaugeMetricFamily(
            "pyworkflow_runs",
            "Runs in the database by status and kind (workflow, traverser).",
            labels=["status", "kind"],
        )
        for status, kind, count in runs:
            by_status.add_metric([status, kind], count)
        yield by_status
        pending = GaugeMetricFamily("pyworkflow_waits_pending", "Pending waits by kind.", labels=["kind"])
        oldest = GaugeMetricFamily(
            "pyworkflow_oldest_pending_wait_age_seconds",
            "Age of the oldest pending wait of each kind.",
            labels=["kind"],
        )
        for kind, count, created in waits:
            pending.add_metric([kind], count)
            oldest.add_metric([kind], max(0.0, at - created))
        yield pending
        yield oldest


_collectors: dict[int, StoreCollector] = {}
_collectors_lock = threading.Lock()


def collect_store(read: Callable[[Callable[[Any], State]], State], key: object) -> Callable[[], None]:
    """Report the state gauges of the database ``key`` (a store or database object) with ``read``;
    once per key. Returns the function that stops reporting it (call it when closing)."""
    with _collectors_lock:
        if id(key) in _collectors:
            return lambda: None
        collector = _collectors[id(key)] = StoreCollector(read)
        REGISTRY.register(collector)

    def stop() -> None:
        with _collectors_lock:
            if _collectors.get(id(key)) is collector:
                del _collectors[id(key)]
                REGISTRY.unregister(collector)
                collector.close()

    return stop


def metrics_text() -> bytes:
    """Every metric of this process in Prometheus text format (:data:`CONTENT_TYPE`)."""
    return generate_latest(REGISTRY)


def start_metrics_server(port: int, host: str = "127.0.0.1") -> int:
    """Serve :data:`REGISTRY` at ``http://host:port/metrics`` from a thread (no authentication:
    bind it where only your scraper reaches). Returns the port (``0`` picks a free one)."""
    server, _ = start_http_server(port, addr=host, registry=REGISTRY)
    return int(server.server_port)


__all__ = [
    "CONTENT_TYPE",
    "GROUP_COMMITS",
    "REGISTRY",
    "StoreCollector",
    "WriterBatches",
    "collect_store",
    "labelled",
    "metrics_text",
    "observe_continuation",
    "start_metrics_server",
]
