"""Storage behind one small protocol, and the kit the stores are built from.

``open_store(url)`` opens the store a storage URL names (see :func:`parse_storage_url` for the one
grammar: ``sqlite:///relative.db``, ``sqlite:////abs.db``, a bare path, ``postgresql://...``).
Components that share the database (the atfgraph graph server) build on the same pieces: the
database classes with their group-commit writer (:class:`SQLiteDatabase`,
:class:`PostgresDatabase`, both a :class:`GroupCommitWriter`), the numbered migrations
(:class:`Migration`, :func:`load_migrations`, :func:`apply_migrations`,
:func:`apply_postgres_migrations`, :func:`pyworkflow_migrations`), the stores themselves, and
the rules both faces apply inside their own transactions (:func:`write_checkpoint`,
:func:`wake_run`: waking a run, pyworkflow's or one served by remote workers, after its wait
resolved or expired), :func:`crashpoint` (the crash-recovery tests' named points, which the
server passes too), retention (:func:`purge_runs`, :func:`count_purgeable`,
:func:`parse_age`: finished runs older than a cut-off deleted in bounded batches), and on
PostgreSQL the run queue's vacuum (:class:`QueueVacuum`, ticked by the loops that serve it), and
the garbage collector's pace while runs are served (:func:`hold_gc_pace`).

Operating them: :mod:`metrics` (the metrics of both faces, one registry per process),
:mod:`tracing` (their OpenTelemetry spans and the trace context a run keeps) and
:func:`setup_logging` (the one logging set-up: level names, text or JSON, :func:`redact`).

``PostgresDatabase`` and ``PostgresStore`` are imported on first use: psycopg is the postgres
extra's, and nothing else here needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._crashpoints import crashpoint
from .._errors import ConfigurationError
from . import _metrics as metrics
from . import _tracing as tracing
from ._gc import YOUNG_GC_THRESHOLD, check_gc_threshold, gc_threshold_from_text, hold_gc_pace
from ._group_commit import WRITE_TIMEOUT, GroupCommitWriter
from ._logs import log_format, log_level, redact, setup_logging
from ._migrations import (
    Migration,
    apply_migrations,
    apply_postgres_migrations,
    load_migrations,
    pyworkflow_migrations,
    refuse_newer_schema,
)
from ._pg_vacuum import DEAD_ROWS as DEAD_QUEUE_ROWS
from ._pg_vacuum import QueueVacuum
from ._protocol import (
    CheckpointRecord,
    Claim,
    Event,
    Fence,
    NewWait,
    RunRecord,
    RunState,
    RunStatus,
    StepRecord,
    StepStatus,
    Store,
    WaitKind,
    WaitRecord,
    WaitStatus,
    database_failed,
    over_a_database_limit,
)
from ._remote import wake_run
from ._retention import Purger, PurgeReport, count_purgeable, parse_age, purge_runs
from ._rows import check_revision, write_checkpoint
from ._sqlite import SQLiteStore
from ._sqlite_db import SQLiteDatabase
from ._url import StorageURL, parse_storage_url, redact_url, sqlite_url

if TYPE_CHECKING:
    from ._pg_db import PostgresDatabase
    from ._postgres import PostgresStore

__all__ = [
    "DEAD_QUEUE_ROWS",
    "WRITE_TIMEOUT",
    "YOUNG_GC_THRESHOLD",
    "CheckpointRecord",
    "Claim",
    "Event",
    "Fence",
    "GroupCommitWriter",
    "Migration",
    "NewWait",
    "PostgresDatabase",
    "PostgresStore",
    "PurgeReport",
    "Purger",
    "QueueVacuum",
    "RunRecord",
    "RunState",
    "RunStatus",
    "SQLiteDatabase",
    "SQLiteStore",
    "StepRecord",
    "StepStatus",
    "StorageURL",
    "Store",
    "WaitKind",
    "WaitRecord",
    "WaitStatus",
    "apply_migrations",
    "apply_postgres_migrations",
    "check_gc_threshold",
    "check_revision",
    "count_purgeable",
    "crashpoint",
    "database_failed",
    "gc_threshold_from_text",
    "hold_gc_pace",
    "load_migrations",
    "log_format",
    "log_level",
    "metrics",
    "open_store",
    "over_a_database_limit",
    "parse_age",
    "parse_storage_url",
    "purge_runs",
    "pyworkflow_migrations",
    "redact",
    "redact_url",
    "refuse_newer_schema",
    "setup_logging",
    "sqlite_path",
    "sqlite_url",
    "tracing",
    "wake_run",
    "write_checkpoint",
]


def __getattr__(name: str) -> Any:
    """``PostgresDatabase`` and ``PostgresStore``, imported (with psycopg) when first asked for."""
    if name == "PostgresDatabase":
        from ._pg_db import PostgresDatabase

        return PostgresDatabase
    if name == "PostgresStore":
        from ._postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def sqlite_path(url: str) -> str:
    """The SQLite file a storage URL names (``sqlite:///relative.db``, ``sqlite:////abs.db`` or a
    bare path); ``ConfigurationError`` for anything else (see :func:`parse_storage_url`)."""
    parsed = parse_storage_url(url)
    if parsed.path is None:
        raise ConfigurationError(f"not a SQLite URL: {parsed.redacted()!r}")
    return parsed.path


def open_store(
    url: str | StorageURL, *, synchronous: str = "FULL", write_timeout: float | None = WRITE_TIMEOUT
) -> Store:
    """Open the store a URL names: ``sqlite:///path.db`` (or a bare path) or ``postgresql://...``.
    On SQLite a write waits at most ``write_timeout`` seconds for the file's write lock, then
    raises :class:`~pyworkflow.DatabaseUnavailableError` (None: no bound)."""
    parsed = url if isinstance(url, StorageURL) else parse_storage_url(url)
    if parsed.path is not None:
        return SQLiteStore(parsed.path, synchronous=synchronous, write_timeout=write_timeout)
    try:
        from ._postgres import PostgresStore
    except ImportError as exc:  # pragma: no cover - depends on the installed extra
        raise ConfigurationError(
            f"PostgreSQL storage needs the postgres extra and its backend: {exc}"
        ) from exc
    store: Store = PostgresStore(parsed.location)
    return store
